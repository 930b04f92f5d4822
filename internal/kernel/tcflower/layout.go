// SPDX-License-Identifier: Apache-2.0

package tcflower

import (
	"golang.org/x/sys/unix"

	"sluice/internal/kernel/nlattr"
)

// The layout of the netlink and tc uapi structs that tcflower reads byte
// by byte (include/uapi/linux/netlink.h, rtnetlink.h, gen_stats.h): every
// offset is named here, once, as kernel/xfrm's layout.go names XFRM's.
// All fields are in host byte order; none is pointer-sized, so the
// offsets are the same on every architecture.

// struct nlmsghdr.
const (
	nlmsgLen    = 0 // __u32, the header included
	nlmsgType   = 4 // __u16
	nlmsgFlags  = 6 // __u16
	nlmsgSeq    = 8 // __u32
	nlmsgHdrLen = unix.SizeofNlMsghdr
)

// struct nlattr and the alignment are kernel/nlattr's, shared with
// kernel/xfrm.

// nlAlign is NLMSG_ALIGN / NLA_ALIGN.
func nlAlign(l int) int { return nlattr.Align(l) }

// struct nlmsgerr: the error, then the request's header (and, without
// NLM_F_CAPPED, its payload), then the extended-ack attributes.
const (
	nlmsgerrError = 0 // int, a negative errno or 0
	nlmsgerrMsg   = 4 // struct nlmsghdr of the request
)

// struct tcmsg: family, 3 pad bytes, ifindex, handle, parent, info.
const (
	tcmHandle = 8  // __u32
	tcmInfo   = 16 // __u32: priority << 16 | protocol (network order)
	tcmsgLen  = 20
)

// struct gnet_stats_basic: bytes u64, packets u32 (12 bytes as the
// kernel sends it: TCA_STATS_BASIC is not padded to 16).
const (
	gnetBasicPackets = 8
	gnetBasicLen     = 12
)
