// SPDX-License-Identifier: Apache-2.0

// Package nlattr is the netlink attribute codec the kernel concept
// packages share (kernel/xfrm, kernel/tcflower): struct nlattr is walked
// and appended here, once. vishvananda/netlink's own (nl.ParseRouteAttr,
// RtAttr trees) panics on a truncated last attribute and allocates a
// node per attribute, which the flower tier's batches cannot afford.
package nlattr

import (
	"encoding/binary"
	"fmt"
)

// struct nlattr (include/uapi/linux/netlink.h), in host byte order.
const (
	offLen  = 0 // __u16, the header included
	offType = 2 // __u16, with NLA_F_NESTED and NLA_F_NET_BYTEORDER
	HdrLen  = 4
	alignTo = 4

	// TypeMask strips NLA_F_NESTED and NLA_F_NET_BYTEORDER from a type.
	TypeMask = 0x3fff
)

// Align rounds a netlink message or attribute length up to its alignment
// (NLMSG_ALIGN, NLA_ALIGN).
func Align(l int) int { return (l + alignTo - 1) &^ (alignTo - 1) }

// Walk calls f for each attribute in b with its type (TypeMask applied)
// and value. A length that does not fit stops the walk with an error
// naming it: a half-read object must not pass for a whole one.
func Walk(b []byte, f func(typ uint16, v []byte)) error {
	for len(b) >= HdrLen {
		l, t := int(binary.NativeEndian.Uint16(b[offLen:])), binary.NativeEndian.Uint16(b[offType:])&TypeMask
		if l < HdrLen || l > len(b) {
			return fmt.Errorf("attribute %d: length %d with %d bytes left", t, l, len(b))
		}
		f(t, b[HdrLen:l])
		b = b[min(Align(l), len(b)):]
	}
	return nil
}

// Append appends one attribute to b, padded to the alignment (b's length
// is taken to be aligned, as it is at every attribute boundary).
func Append(b []byte, typ uint16, v []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(HdrLen+len(v)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, v...)
	for len(b)%alignTo != 0 {
		b = append(b, 0)
	}
	return b
}

// PatchLen writes the length of the attribute that starts at b[at] and
// ends at len(b) (a nest, or one whose value was appended in pieces).
func PatchLen(b []byte, at int) {
	binary.NativeEndian.PutUint16(b[at+offLen:], uint16(len(b)-at))
}
