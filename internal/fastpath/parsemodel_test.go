// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// modelPkt is what the kernel's receive path and XFRM flow decoding make of
// a frame, written plainly from the kernel's code (ip_rcv_core,
// ip6_rcv_core, __xfrm_decode_session and the flow dissector,
// decode_session4/6, xfrm_flowi_sport/dport), plus the cases the fast path
// hands to the kernel without deciding. parse_packet in bpf/parse.h must
// agree with it field for field (FuzzParsePacket).
type modelPkt struct {
	dmac         net.HardwareAddr
	tagged       bool
	vid          uint16
	v6           bool
	src, dst     netip.Addr
	proto, ttl   uint8
	totLen       uint16
	sport, dport uint16 // as the selector match sees them
	icmpErr      bool   // icmp_err_packet()
	l4           []byte // the L4 bytes within the IP length
}

// parseOK is modelParse's "the fast path may classify this" (FP_R_MAX).
const parseOK = reasonMax

// modelParse parses frame as parse_packet must, in the same order of
// checks, returning parseOK or the reason the packet goes to the kernel.
func modelParse(f []byte) (modelPkt, Reason) {
	var p modelPkt
	if len(f) < 14 {
		return p, Reason(fastpathFpReasonFP_R_MALFORMED)
	}
	p.dmac = net.HardwareAddr(f[0:6])
	off, et := 14, binary.BigEndian.Uint16(f[12:])
	if et == 0x8100 || et == 0x88a8 {
		if len(f) < 18 {
			return p, Reason(fastpathFpReasonFP_R_MALFORMED)
		}
		p.tagged, p.vid = true, binary.BigEndian.Uint16(f[14:])&0xfff
		et, off = binary.BigEndian.Uint16(f[16:]), 18
	}
	if f[0]&1 != 0 {
		return p, ReasonL2NotOurs
	}
	room := len(f) - off
	h := f[off:]
	var l4 []byte
	switch et {
	case 0x0800:
		if room < 20 {
			return p, Reason(fastpathFpReasonFP_R_MALFORMED)
		}
		if h[0]>>4 != 4 || h[0]&0xf < 5 {
			return p, Reason(fastpathFpReasonFP_R_MALFORMED)
		}
		if h[0]&0xf != 5 {
			return p, Reason(fastpathFpReasonFP_R_IP_OPTIONS)
		}
		if checksum(h[:20], 0) != 0 {
			return p, ReasonBadIPHeader
		}
		p.totLen = binary.BigEndian.Uint16(h[2:])
		if p.totLen < 20 || int(p.totLen) > room {
			return p, ReasonBadIPHeader
		}
		if binary.BigEndian.Uint16(h[6:])&0x3fff != 0 {
			return p, Reason(fastpathFpReasonFP_R_FRAGMENT)
		}
		p.proto, p.ttl = h[9], h[8]
		p.src, p.dst = netip.AddrFrom4([4]byte(h[12:16])), netip.AddrFrom4([4]byte(h[16:20]))
		l4 = h[20:p.totLen]
	case 0x86dd:
		if room < 40 {
			return p, Reason(fastpathFpReasonFP_R_MALFORMED)
		}
		if h[0]>>4 != 6 {
			return p, Reason(fastpathFpReasonFP_R_MALFORMED)
		}
		p.v6 = true
		p.proto, p.ttl = h[6], h[7]
		p.totLen = binary.BigEndian.Uint16(h[4:]) + 40
		p.src, p.dst = netip.AddrFrom16([16]byte(h[8:24])), netip.AddrFrom16([16]byte(h[24:40]))
		switch p.proto {
		case 0, 43, 44, 60, 59, 135:
			return p, Reason(fastpathFpReasonFP_R_IPV6EXT)
		}
		if int(binary.BigEndian.Uint16(h[4:]))+40 > room {
			return p, ReasonBadIPHeader
		}
		l4 = h[40 : 40+int(binary.BigEndian.Uint16(h[4:]))]
	default:
		return p, Reason(fastpathFpReasonFP_R_NOT_IP)
	}
	p.l4 = l4
	switch p.proto {
	case 50, 51:
		return p, Reason(fastpathFpReasonFP_R_IPSEC)
	case 6, 17, 136, 132:
		if len(l4) >= 4 {
			p.sport, p.dport = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
			if p.proto == 17 && (p.sport == 500 || p.sport == 4500 || p.dport == 500 || p.dport == 4500) {
				return p, Reason(fastpathFpReasonFP_R_IKE)
			}
		}
	case 1, 58:
		own := (!p.v6 && p.proto == 1) || (p.v6 && p.proto == 58)
		if !own || len(l4) < 8 {
			break
		}
		if p.v6 && l4[0] >= 133 && l4[0] <= 137 {
			return p, Reason(fastpathFpReasonFP_R_NOT_IP)
		}
		p.sport, p.dport = uint16(l4[0]), uint16(l4[1])
		if p.v6 {
			p.icmpErr = l4[0] >= 1 && l4[0] <= 3
		} else {
			p.icmpErr = l4[0] == 3 || l4[0] == 11
		}
	case 47, 108:
		return p, ReasonUncertain
	}
	return p, parseOK
}

// modelMartian is the fast path's martian rule (bpf/fastpath.c martian()).
func modelMartian(p modelPkt) bool {
	bad4 := func(a netip.Addr) bool {
		b := a.As4()
		return b[0] == 0 || b[0] == 127 || b[0]&0xf0 == 0xe0 || a == netip.AddrFrom4([4]byte{255, 255, 255, 255})
	}
	bad6 := func(a netip.Addr) bool {
		return a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() ||
			netip.MustParsePrefix("fe80::/10").Contains(a) || a.Is4In6()
	}
	if p.v6 {
		return bad6(p.src) || bad6(p.dst)
	}
	return bad4(p.src) || bad4(p.dst)
}

// quoted parses the packet an ICMP error quotes (after the 8-byte ICMP
// header) as the kernel's xfrm_icmp_flow_decode does: the flow dissector
// over what is left of the error, no length or checksum checks, ports only
// where their bytes are. ok is false when there is no IP header to decode.
func (p modelPkt) quoted() (q modelPkt, ok bool) {
	if len(p.l4) < 8 {
		return q, false
	}
	in := p.l4[8:]
	q.v6 = p.v6
	var l4 []byte
	if p.v6 {
		if len(in) < 40 || in[0]>>4 != 6 {
			return q, false
		}
		q.proto = in[6]
		q.src, q.dst = netip.AddrFrom16([16]byte(in[8:24])), netip.AddrFrom16([16]byte(in[24:40]))
		l4 = in[40:]
	} else {
		if len(in) < 20 || in[0]>>4 != 4 || in[0]&0xf < 5 || len(in) < int(in[0]&0xf)*4 {
			return q, false
		}
		q.proto = in[9]
		q.src, q.dst = netip.AddrFrom4([4]byte(in[12:16])), netip.AddrFrom4([4]byte(in[16:20]))
		l4 = in[int(in[0]&0xf)*4:]
	}
	switch q.proto {
	case 6, 17, 136, 132:
		if len(l4) >= 4 {
			q.sport, q.dport = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
		}
	case 1, 58:
		if len(l4) >= 8 && ((!q.v6 && q.proto == 1) || (q.v6 && q.proto == 58)) {
			q.sport, q.dport = uint16(l4[0]), uint16(l4[1])
		}
	}
	return q, true
}
