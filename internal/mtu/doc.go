// SPDX-License-Identifier: Apache-2.0

// Package mtu is sluice's one MTU arithmetic. Stack lays an encrypted
// overlay packet out byte by byte (`sluice mtu`, the overlay plan, guest
// MTUs, doctor's mtu-headroom check); SA is an XFRM SA's MTU exactly as the
// kernel computes it (xfrm_state_mtu), which the fast path and the flower
// tier forward under. It imports nothing of sluice.
package mtu
