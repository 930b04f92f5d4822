// SPDX-License-Identifier: Apache-2.0

// Package kernel is sluice's only door to the running kernel's networking,
// with its concept packages kernel/xfrm (IPsec) and kernel/tcflower (tc
// flower): netlink (through vishvananda/netlink, plus the few attributes
// it lacks), ethtool, devlink, links, routes, neighbours, SR-IOV and
// throwaway-namespace feature probes.
package kernel
