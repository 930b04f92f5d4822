// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"sluice/internal/kernel/nlattr"
)

// The pieces the SA and policy encoders share (state_add.go, policy.go,
// policy_lookup.go): selectors, addresses, algorithms, marks, attributes.

// putSelector writes struct xfrm_selector the way vishvananda does (a
// given port matches exactly), taking the family from whichever side is set.
func putSelector(b []byte, p *netlink.XfrmPolicy) {
	family := uint16(unix.AF_INET)
	for _, n := range []*net.IPNet{p.Dst, p.Src} {
		if n != nil && n.IP.To4() == nil {
			family = unix.AF_INET6
		}
	}
	if p.Dst != nil {
		putAddr(b[selDaddr:], p.Dst.IP)
		ones, _ := p.Dst.Mask.Size()
		b[selPlenD] = uint8(ones)
	}
	if p.Src != nil {
		putAddr(b[selSaddr:], p.Src.IP)
		ones, _ := p.Src.Mask.Size()
		b[selPlenS] = uint8(ones)
	}
	if p.DstPort != 0 {
		be.PutUint16(b[selDport:], uint16(p.DstPort))
		be.PutUint16(b[selDportMsk:], 0xffff)
	}
	if p.SrcPort != 0 {
		be.PutUint16(b[selSport:], uint16(p.SrcPort))
		be.PutUint16(b[selSportMsk:], 0xffff)
	}
	ne.PutUint16(b[selFamily:], family)
	b[selProto] = uint8(p.Proto)
	ne.PutUint32(b[selIfindex:], uint32(int32(p.Ifindex)))
}

// putAddr writes an xfrm_address_t: IPv4 in the first 4 bytes.
func putAddr(b []byte, ip net.IP) {
	if v4 := ip.To4(); v4 != nil {
		copy(b[:net.IPv4len], v4)
	} else {
		copy(b[:xfrmAddrLen], ip.To16())
	}
}

// algo encodes struct xfrm_algo (name, key bits, key) or, with extra, the
// _auth/_aead variants whose third field is the truncation/ICV length.
func algo(name string, key []byte, extra uint32, hasExtra bool) []byte {
	v := make([]byte, xfrmAlgoNameLen, xfrmAlgoAEADLen+len(key))
	copy(v[algoNameOff:xfrmAlgoNameLen-1], name) // NUL-terminated
	v = ne.AppendUint32(v, uint32(len(key)*8))   // at algoKeyLen
	if hasExtra {
		v = ne.AppendUint32(v, extra)
	}
	return append(v, key...)
}

// marshalMark encodes struct xfrm_mark.
func marshalMark(value, mask uint32) []byte {
	v := make([]byte, xfrmMarkLen)
	ne.PutUint32(v[markValue:], value)
	ne.PutUint32(v[markMask:], mask)
	return v
}

// putAttr appends one netlink attribute, padded (nlattr.Append).
func putAttr(b []byte, typ uint16, v []byte) []byte { return nlattr.Append(b, typ, v) }
