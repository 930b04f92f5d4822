// SPDX-License-Identifier: Apache-2.0

package tcflower

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The library-based encoder the installer used before appendRequest,
// kept as the reference the new encoder must match byte for byte (with
// the fixed structs' true sizes: see structBytes).

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// legacyRequest builds RTM_NEWTFILTER (or RTM_DELTFILTER with del).
func (f *Filter) legacyRequest(del bool) *nl.NetlinkRequest {
	proto, flags := unix.RTM_NEWTFILTER, unix.NLM_F_CREATE|unix.NLM_F_EXCL
	if del {
		proto, flags = unix.RTM_DELTFILTER, 0
	}
	req := nl.NewNetlinkRequest(proto, flags|unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(f.Ifindex), Handle: f.Handle, Parent: clsactIngress,
		Info: uint32(f.Pref)<<16 | uint32(htons(f.Protocol()))})
	req.AddData(nl.NewRtAttr(nl.TCA_CHAIN, nl.Uint32Attr(f.Chain)))
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("flower")))
	if del {
		return req
	}
	opts := nl.NewRtAttr(nl.TCA_OPTIONS, nil)
	var clsFlags uint32
	if f.SkipSW {
		clsFlags |= nl.TCA_CLS_FLAGS_SKIP_SW
	}
	if f.SkipHW {
		clsFlags |= nl.TCA_CLS_FLAGS_SKIP_HW
	}
	opts.AddRtAttr(nl.TCA_FLOWER_FLAGS, nl.Uint32Attr(clsFlags))
	if f.VLANID != 0 {
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_ETH_TYPE, be16(ethP8021Q))
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_VLAN_ID, nl.Uint16Attr(f.VLANID))
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_VLAN_ETH_TYPE, be16(f.ethType()))
	} else {
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_ETH_TYPE, be16(f.ethType()))
	}
	if f.DstMAC != nil {
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_ETH_DST, []byte(f.DstMAC))
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_ETH_DST_MASK, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	}
	if f.IPProto != 0 {
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_IP_PROTO, []byte{f.IPProto})
	}
	addPrefix := func(p netip.Prefix, k4, m4, k6, m6 int) {
		if !p.IsValid() || p.Bits() == 0 {
			return
		}
		a := p.Masked().Addr()
		bits := 32
		k, m := k4, m4
		if f.IPv6 {
			bits, k, m = 128, k6, m6
		}
		opts.AddRtAttr(k, a.AsSlice())
		opts.AddRtAttr(m, net.CIDRMask(p.Bits(), bits))
	}
	addPrefix(f.Src, nl.TCA_FLOWER_KEY_IPV4_SRC, nl.TCA_FLOWER_KEY_IPV4_SRC_MASK, nl.TCA_FLOWER_KEY_IPV6_SRC, nl.TCA_FLOWER_KEY_IPV6_SRC_MASK)
	addPrefix(f.Dst, nl.TCA_FLOWER_KEY_IPV4_DST, nl.TCA_FLOWER_KEY_IPV4_DST_MASK, nl.TCA_FLOWER_KEY_IPV6_DST, nl.TCA_FLOWER_KEY_IPV6_DST_MASK)
	if f.SPortMask|f.DPortMask != 0 {
		sk, sm, dk, dm := nl.TCA_FLOWER_KEY_TCP_SRC, nl.TCA_FLOWER_KEY_TCP_SRC_MASK, nl.TCA_FLOWER_KEY_TCP_DST, nl.TCA_FLOWER_KEY_TCP_DST_MASK
		switch f.IPProto {
		case unix.IPPROTO_UDP:
			sk, sm, dk, dm = nl.TCA_FLOWER_KEY_UDP_SRC, nl.TCA_FLOWER_KEY_UDP_SRC_MASK, nl.TCA_FLOWER_KEY_UDP_DST, nl.TCA_FLOWER_KEY_UDP_DST_MASK
		case unix.IPPROTO_SCTP:
			sk, sm, dk, dm = nl.TCA_FLOWER_KEY_SCTP_SRC, nl.TCA_FLOWER_KEY_SCTP_SRC_MASK, nl.TCA_FLOWER_KEY_SCTP_DST, nl.TCA_FLOWER_KEY_SCTP_DST_MASK
		}
		if f.SPortMask != 0 {
			opts.AddRtAttr(sk, be16(f.SPort))
			opts.AddRtAttr(sm, be16(f.SPortMask))
		}
		if f.DPortMask != 0 {
			opts.AddRtAttr(dk, be16(f.DPort))
			opts.AddRtAttr(dm, be16(f.DPortMask))
		}
	}
	if f.TTLMask != 0 {
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_IP_TTL, []byte{f.TTL})
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_IP_TTL_MASK, []byte{f.TTLMask})
	}
	if f.NoFrag {
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_FLAGS, be32(0))
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_FLAGS_MASK, be32(flowDisIsFrag))
	}
	acts := opts.AddRtAttr(nl.TCA_FLOWER_ACT, nil)
	for i, a := range f.Actions {
		a.legacyEncode(acts.AddRtAttr(i+1, nil))
	}
	req.AddData(opts)
	return req
}

func (a *Action) legacyEncode(at *nl.RtAttr) {
	gen := func(action int32) nl.TcGen { return nl.TcGen{Action: action} }
	switch a.Kind {
	case ActPass:
		at.AddRtAttr(nl.TCA_ACT_KIND, nl.ZeroTerminated("gact"))
		g := gen(tcActOK)
		at.AddRtAttr(nl.TCA_ACT_OPTIONS, nil).AddRtAttr(nl.TCA_GACT_PARMS, structBytes(&g))
	case ActPoliceMTU:
		at.AddRtAttr(nl.TCA_ACT_KIND, nl.ZeroTerminated("police"))
		o := at.AddRtAttr(nl.TCA_ACT_OPTIONS, nil)
		// Over the MTU: TC_ACT_OK ends classification, the packet goes to
		// the host (the kernel sends ICMP / packet too big). Within it:
		// pipe to the next action.
		p := nl.TcPolice{Action: tcActOK, Mtu: a.MTU}
		o.AddRtAttr(nl.TCA_POLICE_TBF, structBytes(&p))
		o.AddRtAttr(nl.TCA_POLICE_RESULT, nl.Uint32Attr(tcActPipe))
	case ActVLANPop, ActVLANPush:
		at.AddRtAttr(nl.TCA_ACT_KIND, nl.ZeroTerminated("vlan"))
		o := at.AddRtAttr(nl.TCA_ACT_OPTIONS, nil)
		v := nl.TcVlan{TcGen: gen(tcActPipe), Action: 1}
		if a.Kind == ActVLANPush {
			v.Action = 2
		}
		o.AddRtAttr(nl.TCA_VLAN_PARMS, structBytes(&v))
		if a.Kind == ActVLANPush {
			o.AddRtAttr(nl.TCA_VLAN_PUSH_VLAN_ID, nl.Uint16Attr(a.VLANID))
			o.AddRtAttr(nl.TCA_VLAN_PUSH_VLAN_PROTOCOL, be16(ethP8021Q))
		}
	case ActDecTTL, ActSetMACs:
		p := peditFor(a)
		p.Encode(at)
	case ActCsumIP:
		at.AddRtAttr(nl.TCA_ACT_KIND, nl.ZeroTerminated("csum"))
		c := nl.TcCsum{TcGen: gen(tcActPipe), UpdateFlags: 1} // TCA_CSUM_UPDATE_FLAG_IPV4HDR
		at.AddRtAttr(nl.TCA_ACT_OPTIONS, nil).AddRtAttr(nl.TCA_CSUM_PARMS, structBytes(&c))
	case ActRedirect:
		at.AddRtAttr(nl.TCA_ACT_KIND, nl.ZeroTerminated("mirred"))
		m := nl.TcMirred{TcGen: gen(tcActStolen), Eaction: 1, Ifindex: uint32(a.Ifindex)} // TCA_EGRESS_REDIR
		at.AddRtAttr(nl.TCA_ACT_OPTIONS, nil).AddRtAttr(nl.TCA_MIRRED_PARMS, structBytes(&m))
	}
}

// flowerEncodeCases covers every key and action the encoder knows.
func flowerEncodeCases() []*Filter {
	mac := net.HardwareAddr{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}
	mac2 := net.HardwareAddr{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}
	fwd := []Action{{Kind: ActPoliceMTU, MTU: 1500}, {Kind: ActDecTTL}, {Kind: ActSetMACs, DstMAC: mac, SrcMAC: mac2},
		{Kind: ActCsumIP}, {Kind: ActRedirect, Ifindex: 7}}
	return []*Filter{
		{Ifindex: 3, Chain: 0, Pref: 49005, Handle: 1, SkipHW: true, Src: netip.MustParsePrefix("16.0.1.0/24"),
			Dst: netip.MustParsePrefix("48.0.1.0/24"), NoFrag: true, Actions: fwd},
		{Ifindex: 3, Chain: 1, Pref: 49004, Handle: 2, SkipSW: true, VLANID: 100, DstMAC: mac, IPProto: unix.IPPROTO_UDP,
			Src: netip.MustParsePrefix("10.1.2.3/32"), Dst: netip.MustParsePrefix("10.9.0.0/16"), SPort: 500, SPortMask: 0xffff,
			DPort: 4500, DPortMask: 0xfff0, NoFrag: true,
			Actions: []Action{{Kind: ActVLANPop}, {Kind: ActDecTTL}, {Kind: ActVLANPush, VLANID: 200}, {Kind: ActRedirect, Ifindex: 9}}},
		{Ifindex: 4, Pref: 49006, Handle: 3, SkipSW: true, IPv6: true, IPProto: unix.IPPROTO_TCP,
			Src: netip.MustParsePrefix("2001:db8:1::/48"), Dst: netip.MustParsePrefix("2001:db8:2::/64"), DPort: 443, DPortMask: 0xffff,
			NoFrag: true, Actions: []Action{{Kind: ActPoliceMTU, MTU: 9000}, {Kind: ActDecTTL, Hoplimit: true}, {Kind: ActRedirect, Ifindex: 2}}},
		{Ifindex: 4, Pref: 49004, Handle: 4, IPProto: unix.IPPROTO_SCTP, SPort: 1, SPortMask: 0xffff,
			Src: netip.MustParsePrefix("192.0.2.0/25"), Actions: []Action{{Kind: ActRedirect, Ifindex: 2}}},
		{Ifindex: 5, Pref: 49002, Handle: 5, SkipSW: true, TTL: 0, TTLMask: 0xfe, Actions: []Action{{Kind: ActPass}}},
		{Ifindex: 5, Pref: 49003, Handle: 6, SkipSW: true, IPv6: true, IPProto: 58, Actions: []Action{{Kind: ActPass}}},
		{Ifindex: 5, Pref: 49002, Handle: 7, SkipSW: true, Src: netip.MustParsePrefix("198.51.100.7/32"), Actions: []Action{{Kind: ActPass}}},
		{Ifindex: 5, Chain: 3, Pref: 49002, Handle: 8, anyProto: true},
	}
}

func TestFlowerEncodeMatchesLibrary(t *testing.T) {
	for i, f := range flowerEncodeCases() {
		for _, del := range []bool{false, true} {
			req := f.legacyRequest(del)
			want := req.Serialize()
			got := f.appendRequest([]byte("prefix"), req.Seq, del)
			if !bytes.HasPrefix(got, []byte("prefix")) {
				t.Fatalf("case %d: appendRequest lost what the buffer held", i)
			}
			if got = got[len("prefix"):]; !bytes.Equal(got, want) {
				t.Errorf("case %d del=%v: encodings differ\n got %x\nwant %x", i, del, got, want)
			}
		}
	}
}

// BenchmarkFlowerEncode compares the encoders on a forwarding rule (the
// installer's per-rule Go work before the system call).
func BenchmarkFlowerEncode(b *testing.B) {
	f := flowerEncodeCases()[0]
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for i := 0; b.Loop(); i++ {
			buf = f.appendRequest(buf[:0], uint32(i), false)
		}
	})
	b.Run("library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = f.legacyRequest(false).Serialize()
		}
	})
}
