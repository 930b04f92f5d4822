// SPDX-License-Identifier: Apache-2.0

package wire

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/sys/unix"
)

// FrameClass is what a captured frame is.
type FrameClass int

const (
	// ESP is IPsec: IP protocol 50 (IPv6: after extension headers), or
	// ESP in UDP 4500 (RFC 3948, non-zero SPI).
	ESP FrameClass = iota
	// Cleartext is any other IP packet, data that should have been ESP.
	Cleartext
	// LinkControl is the host's own link traffic that goes out in clear
	// on any NIC: ARP, LLDP, LACP, IGMP and 224.0.0.0/24, IPv6 neighbour
	// discovery, MLD and link-local traffic.
	LinkControl
	// NonIP is any other ethertype: it may carry data, so a "no
	// cleartext at all" assertion counts it.
	NonIP
)

func (c FrameClass) String() string {
	return [...]string{"esp", "cleartext", "link-control", "non-ip"}[c]
}

// Frame is one captured frame, classified.
type Frame struct {
	Class     FrameClass
	EtherType uint16 // after VLAN tags
	VLANs     int    // tags in front of it
	Src, Dst  netip.Addr
	Proto     uint8 // IP protocol, after IPv6 extension headers
	Fragment  bool
	SPI, Seq  uint32 // ESP (not in UDP), first fragment or whole
	Len       int
}

func (f Frame) String() string {
	if !f.Src.IsValid() {
		return fmt.Sprintf("%s ethertype %#04x len %d", f.Class, f.EtherType, f.Len)
	}
	s := fmt.Sprintf("%s %s > %s proto %d len %d", f.Class, f.Src, f.Dst, f.Proto, f.Len)
	if f.SPI != 0 {
		s += fmt.Sprintf(" spi %#x seq %d", f.SPI, f.Seq)
	}
	if f.Fragment {
		s += " fragment"
	}
	if f.VLANs > 0 {
		s += fmt.Sprintf(" vlans %d", f.VLANs)
	}
	return s
}

// Flow selects frames by their IP addresses: Src and Dst prefixes, in
// that direction only. The zero Flow selects every IP frame.
type Flow struct {
	Src, Dst netip.Prefix
}

// FlowOf parses "SRC DST" prefixes (or addresses) into a Flow.
func FlowOf(src, dst string) Flow {
	p := func(s string) netip.Prefix {
		if !strings.Contains(s, "/") {
			a := netip.MustParseAddr(s)
			return netip.PrefixFrom(a, a.BitLen())
		}
		return netip.MustParsePrefix(s)
	}
	return Flow{Src: p(src), Dst: p(dst)}
}

// Has reports whether f belongs to the flow.
func (fl Flow) Has(f Frame) bool {
	if !f.Src.IsValid() {
		return false
	}
	return (!fl.Src.IsValid() || fl.Src.Contains(f.Src)) &&
		(!fl.Dst.IsValid() || fl.Dst.Contains(f.Dst))
}

// ClassifyFrame reads an Ethernet frame (behind up to two VLAN tags).
func ClassifyFrame(b []byte) Frame {
	f := Frame{Class: NonIP, Len: len(b)}
	if len(b) < 14 {
		return f
	}
	off := 12
	et := binary.BigEndian.Uint16(b[off:])
	for f.VLANs < 2 && (et == 0x8100 || et == 0x88a8) && len(b) >= off+6 {
		off += 4
		f.VLANs++
		et = binary.BigEndian.Uint16(b[off:])
	}
	off += 2
	f.EtherType = et
	switch et {
	case 0x0806, 0x88cc, 0x8809, 0x888e: // ARP, LLDP, slow protocols (LACP), EAPOL
		f.Class = LinkControl
	case 0x0800:
		classifyIPv4(b[off:], &f)
	case 0x86dd:
		classifyIPv6(b[off:], &f)
	}
	return f
}

func classifyIPv4(p []byte, f *Frame) {
	if len(p) < 20 || p[0]>>4 != 4 {
		return
	}
	ihl := int(p[0]&0xf) * 4
	f.Src, _ = netip.AddrFromSlice(p[12:16])
	f.Dst, _ = netip.AddrFromSlice(p[16:20])
	f.Proto = p[9]
	fragOff := binary.BigEndian.Uint16(p[6:]) & 0x1fff
	f.Fragment = binary.BigEndian.Uint16(p[6:])&0x2000 != 0 || fragOff != 0
	f.Class = Cleartext
	switch {
	case f.Proto == unix.IPPROTO_ESP:
		f.Class = ESP
		f.SPI, f.Seq = espHeader(p, ihl, fragOff)
	case f.Proto == unix.IPPROTO_UDP && fragOff == 0 && isESPInUDP(p, ihl):
		f.Class = ESP
	case f.Proto == unix.IPPROTO_IGMP, f.Dst.As4()[0] == 224 && f.Dst.As4()[1] == 0 && f.Dst.As4()[2] == 0:
		f.Class = LinkControl
	}
}

// espHeader reads SPI and sequence number at off, if there.
func espHeader(p []byte, off int, fragOff uint16) (uint32, uint32) {
	if fragOff != 0 || len(p) < off+8 {
		return 0, 0
	}
	return binary.BigEndian.Uint32(p[off:]), binary.BigEndian.Uint32(p[off+4:])
}

// isESPInUDP: UDP to port 4500 whose payload starts with a non-zero SPI
// (zero is the IKE marker).
func isESPInUDP(p []byte, l4 int) bool {
	if len(p) < l4+12 || binary.BigEndian.Uint16(p[l4+2:]) != 4500 {
		return false
	}
	return binary.BigEndian.Uint32(p[l4+8:]) != 0
}

func classifyIPv6(p []byte, f *Frame) {
	if len(p) < 40 || p[0]>>4 != 6 {
		return
	}
	f.Src, _ = netip.AddrFromSlice(p[8:24])
	f.Dst, _ = netip.AddrFromSlice(p[24:40])
	f.Class = Cleartext
	next, off := p[6], 40
	// Extension headers: hop-by-hop, routing, fragment, destination
	// options, authentication.
walk:
	for n := 0; n < 8 && len(p) >= off+8; n++ {
		switch next {
		case 0, 43, 60:
			next, off = p[off], off+(int(p[off+1])+1)*8
			continue
		case 44:
			f.Fragment = true
			next, off = p[off], off+8
			continue
		case 51:
			next, off = p[off], off+(int(p[off+1])+2)*4
			continue
		}
		break walk
	}
	f.Proto = next
	switch {
	case next == unix.IPPROTO_ESP:
		f.Class = ESP
		f.SPI, f.Seq = espHeader(p, off, 0)
	case next == unix.IPPROTO_UDP && !f.Fragment && isESPInUDP(p, off):
		f.Class = ESP
	case next == unix.IPPROTO_ICMPV6 && len(p) > off && isICMPv6Control(p[off]):
		f.Class = LinkControl
	case f.Src.IsLinkLocalUnicast(), f.Dst.IsLinkLocalUnicast(), f.Dst.IsLinkLocalMulticast(),
		f.Dst.IsInterfaceLocalMulticast():
		f.Class = LinkControl
	}
}

// isICMPv6Control: MLD (130-132, 143), router and neighbour discovery
// (133-137).
func isICMPv6Control(typ byte) bool {
	return (typ >= 130 && typ <= 137) || typ == 143
}

// Count is frames by class.
type Count map[FrameClass]int

func (c Count) String() string {
	return fmt.Sprintf("esp %d, cleartext %d, link-control %d, non-ip %d", c[ESP], c[Cleartext], c[LinkControl], c[NonIP])
}

// Tally counts frames by class: those of flow only, or all with the zero
// Flow (then non-IP frames count too).
func Tally(frames []Frame, flow Flow) Count {
	c := Count{}
	all := flow == Flow{}
	for _, f := range frames {
		if all || flow.Has(f) {
			c[f.Class]++
		}
	}
	return c
}
