// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"net"
	"net/netip"
	"testing"
)

// FuzzSummarize checks the frame summary `gateway explain` prints of the
// frame the program returns: any bytes (explain --hex takes any) give a
// summary or an error, never a panic; and a frame built by Packet.Marshal
// summarizes to the MACs, VLAN, addresses and TTL it was built with, with
// a valid IPv4 header checksum.
//
//	go test -run '^$' -fuzz '^FuzzSummarize$' -fuzztime 30s ./internal/fastpath/
func FuzzSummarize(f *testing.F) {
	v4 := func(s string) []byte { return netip.MustParseAddr(s).AsSlice() }
	seed := func(p Packet) {
		raw, err := p.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw, p.Src.AsSlice(), p.Dst.AsSlice(), p.VLAN, p.TTL, p.Proto, uint8(p.Payload), p.IPOptions, p.IPv6Ext)
	}
	seed(Packet{Src: netip.MustParseAddr("10.0.1.5"), Dst: netip.MustParseAddr("10.0.2.9"), Proto: 6, SPort: 1000, DPort: 2000, TTL: 64, Payload: 10})
	seed(Packet{Src: netip.MustParseAddr("10.0.1.5"), Dst: netip.MustParseAddr("10.0.2.9"), Proto: 17, VLAN: 100, TTL: 1, IPOptions: true, Fragment: true})
	seed(Packet{Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"), Proto: 58, ICMPType: 128, TTL: 255, IPv6Ext: true})
	f.Add([]byte("\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00\x4f"+string(make([]byte, 19))), v4("1.2.3.4"), v4("5.6.7.8"), uint16(0), uint8(0), uint8(0), uint8(0), false, false)
	f.Fuzz(func(t *testing.T, raw, src, dst []byte, vlan uint16, ttl, proto, payload uint8, opts, ext bool) {
		if s, err := Summarize(raw); err == nil && (s.DstMAC == "" || s.SrcMAC == "") {
			t.Fatalf("summary %+v", s)
		}
		s, ok1 := netip.AddrFromSlice(src)
		d, ok2 := netip.AddrFromSlice(dst)
		if !ok1 || !ok2 || s.Is4() != d.Is4() {
			return
		}
		p := Packet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 7}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 8}, VLAN: vlan & 0xfff,
			Src: s, Dst: d, Proto: proto, TTL: ttl, Payload: int(payload), IPOptions: opts, IPv6Ext: ext}
		frame, err := p.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Summarize(frame)
		if err != nil {
			t.Fatalf("Summarize(Marshal(%+v)): %v", p, err)
		}
		if got.SrcMAC != p.SrcMAC.String() || got.DstMAC != p.DstMAC.String() || got.VLAN != p.VLAN ||
			got.Src != s.String() || got.Dst != d.String() || got.TTL != ttl {
			t.Fatalf("packet %+v summarizes as %+v", p, got)
		}
		if s.Is4() && (got.ChecksumOK == nil || !*got.ChecksumOK) {
			t.Fatalf("IPv4 checksum of %+v not valid", p)
		}
	})
}
