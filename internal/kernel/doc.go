// SPDX-License-Identifier: Apache-2.0

// Package kernel is sluice's only door to the running kernel's networking:
// netlink (through vishvananda/netlink, plus the few attributes it lacks,
// such as XFRMA_OFFLOAD_DEV), throwaway-namespace feature probes, and the
// XFRM policy/SA mirror source used by the fast path.
package kernel
