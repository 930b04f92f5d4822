// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
)

// Packet describes a test or explain packet by its fields. Marshal turns
// it into an Ethernet frame with valid IPv4 and L4 checksums.
type Packet struct {
	SrcMAC, DstMAC net.HardwareAddr
	VLAN           uint16 // 0: untagged
	Src, Dst       netip.Addr
	Proto          uint8 // 6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6, ...
	SPort, DPort   uint16
	ICMPType       uint8
	ICMPCode       uint8
	TTL            uint8 // sent as is: 0 is a TTL of 0
	Payload        int   // zero bytes after the L4 header (and Quote)
	// Quote follows the L4 header: the packet an ICMP error quotes (its
	// IP header on), or any other L4 payload.
	Quote []byte
	// Oddities the fast path must hand to the kernel.
	IPOptions bool
	Fragment  bool
	IPv6Ext   bool // a hop-by-hop options header
}

var (
	defaultSrcMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	defaultDstMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
)

// Marshal builds the frame.
func (p Packet) Marshal() ([]byte, error) {
	if !p.Src.IsValid() || !p.Dst.IsValid() || p.Src.Is4() != p.Dst.Is4() {
		return nil, fmt.Errorf("packet: src and dst must both be IPv4 or both IPv6 (got %v, %v)", p.Src, p.Dst)
	}
	ttl := p.TTL
	l4 := p.l4()
	var l3 []byte
	if p.Src.Is4() {
		l3 = p.ipv4(ttl, l4)
	} else {
		l3 = p.ipv6(ttl, l4)
	}
	src, dst := p.SrcMAC, p.DstMAC
	if src == nil {
		src = defaultSrcMAC
	}
	if dst == nil {
		dst = defaultDstMAC
	}
	frame := append([]byte{}, dst...)
	frame = append(frame, src...)
	if p.VLAN != 0 {
		frame = binary.BigEndian.AppendUint16(frame, 0x8100)
		frame = binary.BigEndian.AppendUint16(frame, p.VLAN&0x0fff)
	}
	etype := uint16(0x0800)
	if p.Src.Is6() {
		etype = 0x86dd
	}
	frame = binary.BigEndian.AppendUint16(frame, etype)
	return append(frame, l3...), nil
}

func (p Packet) l4() []byte {
	var h []byte
	switch p.Proto {
	case 6:
		h = make([]byte, 20)
		binary.BigEndian.PutUint16(h[0:], p.SPort)
		binary.BigEndian.PutUint16(h[2:], p.DPort)
		h[12] = 5 << 4
	case 17, 136: // UDP, UDP-Lite
		h = make([]byte, 8)
		binary.BigEndian.PutUint16(h[0:], p.SPort)
		binary.BigEndian.PutUint16(h[2:], p.DPort)
		binary.BigEndian.PutUint16(h[4:], uint16(8+len(p.Quote)+p.Payload))
	case 132: // SCTP
		h = make([]byte, 12)
		binary.BigEndian.PutUint16(h[0:], p.SPort)
		binary.BigEndian.PutUint16(h[2:], p.DPort)
	case 1, 58:
		h = make([]byte, 8)
		h[0], h[1] = p.ICMPType, p.ICMPCode
	default:
		h = make([]byte, 8)
	}
	h = append(h, p.Quote...)
	return append(h, make([]byte, p.Payload)...)
}

// L3 is the packet from its IP header on: what an ICMP error quotes.
func (p Packet) L3() ([]byte, error) {
	f, err := p.Marshal()
	if err != nil {
		return nil, err
	}
	if p.VLAN != 0 {
		return f[18:], nil
	}
	return f[14:], nil
}

func (p Packet) ipv4(ttl uint8, l4 []byte) []byte {
	ihl := 5
	if p.IPOptions {
		ihl = 6
	}
	h := make([]byte, ihl*4)
	h[0] = 0x40 | byte(ihl)
	binary.BigEndian.PutUint16(h[2:], uint16(len(h)+len(l4)))
	if p.Fragment {
		binary.BigEndian.PutUint16(h[6:], 0x2000) // more fragments
	}
	h[8], h[9] = ttl, p.Proto
	s, d := p.Src.As4(), p.Dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	if p.IPOptions {
		h[20] = 1 // NOP options
		h[21], h[22], h[23] = 1, 1, 0
	}
	binary.BigEndian.PutUint16(h[10:], checksum(h, 0))
	p.l4Checksum(l4, pseudo4(s, d, p.Proto, len(l4)))
	return append(h, l4...)
}

func (p Packet) ipv6(ttl uint8, l4 []byte) []byte {
	h := make([]byte, 40)
	h[0] = 0x60
	next := p.Proto
	var ext []byte
	if p.IPv6Ext {
		ext = make([]byte, 8)
		ext[0] = p.Proto
		next = 0 // hop-by-hop
	}
	binary.BigEndian.PutUint16(h[4:], uint16(len(ext)+len(l4)))
	h[6], h[7] = next, ttl
	s, d := p.Src.As16(), p.Dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	p.l4Checksum(l4, pseudo6(s, d, p.Proto, len(l4)))
	return append(append(h, ext...), l4...)
}

func (p Packet) l4Checksum(l4 []byte, pseudo uint32) {
	switch p.Proto {
	case 6:
		binary.BigEndian.PutUint16(l4[16:], checksum(l4, pseudo))
	case 17:
		binary.BigEndian.PutUint16(l4[6:], checksum(l4, pseudo))
	case 1:
		binary.BigEndian.PutUint16(l4[2:], checksum(l4, 0))
	case 58:
		binary.BigEndian.PutUint16(l4[2:], checksum(l4, pseudo))
	}
}

func pseudo4(s, d [4]byte, proto uint8, n int) uint32 {
	var sum uint32
	for i := 0; i < 4; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(s[i:])) + uint32(binary.BigEndian.Uint16(d[i:]))
	}
	return sum + uint32(proto) + uint32(n)
}

func pseudo6(s, d [16]byte, proto uint8, n int) uint32 {
	var sum uint32
	for i := 0; i < 16; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(s[i:])) + uint32(binary.BigEndian.Uint16(d[i:]))
	}
	return sum + uint32(proto) + uint32(n)
}

// checksum is the Internet checksum (RFC 1071) of b plus a partial sum.
func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// FrameSummary is what explain shows of a frame the program rewrote.
type FrameSummary struct {
	DstMAC     string `json:"dst_mac"`
	SrcMAC     string `json:"src_mac"`
	VLAN       uint16 `json:"vlan,omitempty"`
	Src        string `json:"src,omitempty"`
	Dst        string `json:"dst,omitempty"`
	TTL        uint8  `json:"ttl"`
	ChecksumOK *bool  `json:"ipv4_checksum_ok,omitempty"`
}

// Summarize reads the L2/L3 header fields of a frame.
func Summarize(b []byte) (FrameSummary, error) {
	var s FrameSummary
	if len(b) < 14 {
		return s, fmt.Errorf("frame of %d bytes is shorter than an Ethernet header", len(b))
	}
	s.DstMAC, s.SrcMAC = net.HardwareAddr(b[0:6]).String(), net.HardwareAddr(b[6:12]).String()
	off, et := 14, binary.BigEndian.Uint16(b[12:])
	if et == 0x8100 || et == 0x88a8 {
		if len(b) < 18 {
			return s, fmt.Errorf("truncated VLAN tag")
		}
		s.VLAN = binary.BigEndian.Uint16(b[14:]) & 0xfff
		et, off = binary.BigEndian.Uint16(b[16:]), 18
	}
	switch {
	case et == 0x0800 && len(b) >= off+20:
		// The header length comes from the frame (explain --hex takes any
		// bytes): a length below 20 or past the frame is an error, not a
		// slice out of range (found by FuzzSummarize).
		ihl := int(b[off]&0xf) * 4
		if ihl < 20 || off+ihl > len(b) {
			return s, fmt.Errorf("IPv4 header length %d in a frame of %d bytes", ihl, len(b))
		}
		h := b[off : off+ihl]
		s.Src, s.Dst = netip.AddrFrom4([4]byte(h[12:16])).String(), netip.AddrFrom4([4]byte(h[16:20])).String()
		s.TTL = h[8]
		ok := checksum(h, 0) == 0
		s.ChecksumOK = &ok
	case et == 0x86dd && len(b) >= off+40:
		h := b[off:]
		s.Src, s.Dst = netip.AddrFrom16([16]byte(h[8:24])).String(), netip.AddrFrom16([16]byte(h[24:40])).String()
		s.TTL = h[7]
	}
	return s, nil
}
