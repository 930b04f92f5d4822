// SPDX-License-Identifier: Apache-2.0

// Package overlay turns host.yaml (an encrypted overlay: active-backup bond
// over the uplinks, SR-IOV VFs, VXLAN/Geneve VTEPs on a loopback /32, XFRM
// SAs and policies with NIC offload) into a plan of steps by comparing the
// file with the live host, applies the plan through internal/kernel
// (netlink, sysfs, devlink, ethtool ioctls; never by running ip), verifies
// the result and tears down exactly what it created.
//
// Its MTU arithmetic lives in internal/mtu.
//
// Every step carries the equivalent ip/devlink/ethtool/sysfs command so a
// plan can be read, reviewed and pasted; keys never appear in a step, a
// message or an error (they print as <redacted>).
package overlay
