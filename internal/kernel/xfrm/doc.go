// SPDX-License-Identifier: Apache-2.0

// Package xfrm is the kernel's IPsec database (XFRM) as sluice reads and
// writes it over NETLINK_XFRM: the uapi structs decoded and encoded byte
// by byte (vishvananda/netlink drops what the fast path needs: port masks,
// template "optional", policy type, security context, XFRMA_OFFLOAD_DEV),
// dumps, the monitor the fast path's mirror follows, adding and deleting
// SAs and policies, SA details and counters, and device offload probes.
// Key material is written when an SA is added and otherwise never read,
// except as a digest or when `show` is explicitly asked for keys.
package xfrm
