// SPDX-License-Identifier: Apache-2.0

// Package kernel is sluice's only door to the running kernel's networking,
// with its concept packages kernel/xfrm (IPsec) and kernel/tcflower (tc
// flower): netlink (through vishvananda/netlink, plus the few attributes
// it lacks), ethtool, devlink, links, routes, neighbours, SR-IOV and
// throwaway-namespace feature probes.
//
// Its errors state facts: what failed and the errno, as typed errors
// where a caller needs the details (NoNeighbourError, NoVFPortError).
// What the user should do about them depends on who asked, so the caller
// writes it (internal/diag for doctor checks); internal/guard keeps
// advice out of this package's messages.
package kernel
