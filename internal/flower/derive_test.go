// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"sluice/internal/fastpath"
	"sluice/internal/kernel/xfrm"
)

// The ConnectX-7 benchmark's layout: p0 (ifindex 2) carries ESP, its VLAN child p0.502
// (ifindex 3, tag 502) the cleartext side.
const (
	p0    = 2
	p0vl  = 3
	other = 9
)

var (
	macGW  = net.HardwareAddr{2, 0, 0, 0, 0, 0xfe}
	macP0  = net.HardwareAddr{2, 0, 0, 0, 0, 2}
	macLAN = net.HardwareAddr{2, 0, 0, 0, 0, 1}
)

// fakeRouter routes 48/8 out of p0 and 16/8 to the LAN host via p0.502;
// anything else has no single route.
type fakeRouter struct{}

func (fakeRouter) Route(dst netip.Prefix) (NextHop, string) {
	switch {
	case netip.MustParsePrefix("48.0.0.0/8").Contains(dst.Addr()) && dst.Bits() >= 8:
		return NextHop{Ifindex: p0, Name: "p0", DstMAC: macGW, SrcMAC: macP0, MTU: 1500}, ""
	case netip.MustParsePrefix("16.0.0.0/8").Contains(dst.Addr()) && dst.Bits() >= 8:
		return NextHop{Ifindex: p0vl, Name: "p0.502", ParentIfindex: p0, ParentName: "p0", VLANID: 502,
			DstMAC: macLAN, SrcMAC: macP0, MTU: 1500}, ""
	case netip.MustParsePrefix("2001:db8:48::/48").Contains(dst.Addr()) && dst.Bits() >= 48:
		return NextHop{Ifindex: p0, Name: "p0", DstMAC: macGW, SrcMAC: macP0, MTU: 1500}, ""
	case netip.MustParsePrefix("49.0.0.0/8").Contains(dst.Addr()):
		return NextHop{Ifindex: other, Name: "p1", MTU: 1500}, ""
	}
	return NextHop{}, "more specific routes inside the prefix"
}

var idx uint32

// tunnel returns strongSwan's four policies for src<->dst on packet
// offload device dev, and its two SAs.
func tunnel(src, dst string, prio uint32, dev int) ([]xfrm.Policy, []xfrm.State) {
	idx += 8
	local, peer := netip.MustParseAddr("123.0.0.1"), netip.MustParseAddr("123.2.0.1")
	if strings.Contains(src, ":") {
		local, peer = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	}
	s, d := netip.MustParsePrefix(src), netip.MustParsePrefix(dst)
	reqid := idx
	out := xfrm.Policy{Index: idx + 1, Dir: xfrm.DirOut, Priority: prio, Sel: xfrm.Selector{Src: s, Dst: d},
		Tmpls:   []xfrm.Tmpl{{Src: local, Dst: peer, Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, Reqid: reqid}},
		Offload: &xfrm.Offload{Ifindex: dev, Flags: xfrm.OffloadPacket}}
	fwdOut := out
	fwdOut.Index, fwdOut.Dir, fwdOut.Offload = idx+2, xfrm.DirFwd, nil
	fwdOut.Tmpls = []xfrm.Tmpl{{Src: local, Dst: peer, Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, Reqid: reqid, Optional: true}}
	in := xfrm.Policy{Index: idx + 3, Dir: xfrm.DirIn, Priority: prio, Sel: xfrm.Selector{Src: d, Dst: s},
		Tmpls:   []xfrm.Tmpl{{Src: peer, Dst: local, Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, Reqid: reqid}},
		Offload: &xfrm.Offload{Ifindex: dev, Flags: xfrm.OffloadPacket | xfrm.OffloadInbound}}
	fwdIn := in
	fwdIn.Index, fwdIn.Dir, fwdIn.Offload = idx+4, xfrm.DirFwd, nil
	states := []xfrm.State{
		{Src: local, Dst: peer, Proto: xfrm.ProtoESP, SPI: idx + 100, Reqid: reqid, Mode: xfrm.ModeTunnel, Offload: &xfrm.Offload{Ifindex: dev, Flags: xfrm.OffloadPacket}},
		{Src: peer, Dst: local, Proto: xfrm.ProtoESP, SPI: idx + 200, Reqid: reqid, Mode: xfrm.ModeTunnel, Offload: &xfrm.Offload{Ifindex: dev, Flags: xfrm.OffloadPacket | xfrm.OffloadInbound}},
	}
	return []xfrm.Policy{out, fwdOut, in, fwdIn}, states
}

func ports(inbound bool) []Port {
	return []Port{
		{Name: "p0", Ifindex: p0, Inbound: inbound, InboundForward: inbound, TTL: true, L2FIB: true},
		{Name: "p0.502", Ifindex: p0vl, ParentIfindex: p0, ParentName: "p0", VLANID: 502, Outbound: true, TTL: true, L2FIB: true},
	}
}

func derive(snap fastpath.Snapshot, ps []Port) Result {
	return Derive(Input{Views: fastpath.PolicyViews(snap), FwdDefaultBlock: snap.FwdDefaultBlock, Ports: ps,
		Router: fakeRouter{}, InboundChain: 1})
}

func forwards(r Result) []Rule {
	var out []Rule
	for _, x := range r.Rules {
		if x.Kind == KindForward {
			out = append(out, x)
		}
	}
	return out
}

func TestDeriveOutboundAndInbound(t *testing.T) {
	pols, states := tunnel("16.0.0.0/16", "48.0.0.0/16", 100, p0)
	res := derive(withMTU(fastpath.Snapshot{Policies: pols, States: states}), ports(true))
	fw := forwards(res)
	if len(fw) != 2 {
		t.Fatalf("want one outbound and one inbound rule, got %d: %v\nskips %v", len(fw), res.Rules, res.Skips)
	}
	out, in := fw[0], fw[1]
	if out.Dir != Outbound {
		out, in = in, out
	}
	want := "dev p0 chain 0 pref 49004 protocol 802.1Q flower vlan_id 502 vlan_ethtype ip src_ip 16.0.0.0/16 dst_ip 48.0.0.0/16 ip_flags nofrag action police mtu 1460 conform-exceed pass/pipe action vlan pop action pedit ex munge ip ttl add 0xff action pedit ex munge eth dst set 02:00:00:00:00:fe munge eth src set 02:00:00:00:00:02 action csum ip action mirred egress redirect dev p0"
	if out.String() != want {
		t.Errorf("outbound rule\n got %s\nwant %s", out.String(), want)
	}
	want = "dev p0 chain 1 pref 49005 protocol ip flower src_ip 48.0.0.0/16 dst_ip 16.0.0.0/16 ip_flags nofrag action police mtu 1500 conform-exceed pass/pipe action pedit ex munge ip ttl add 0xff action pedit ex munge eth dst set 02:00:00:00:00:01 munge eth src set 02:00:00:00:00:02 action csum ip action vlan push id 502 action mirred egress redirect dev p0"
	if in.String() != want {
		t.Errorf("inbound rule\n got %s\nwant %s", in.String(), want)
	}
	// Guards: ICMP and TTL, for chain 0 VLAN 502 and chain 1 untagged.
	var guards []string
	for _, r := range res.Rules {
		if r.Kind != KindForward {
			guards = append(guards, r.String())
		}
	}
	wantGuards := []string{
		"dev p0 chain 0 pref 49001 protocol 802.1Q flower vlan_id 502 vlan_ethtype ip ip_proto 1 action pass",
		"dev p0 chain 0 pref 49001 protocol 802.1Q flower vlan_id 502 vlan_ethtype ip ip_ttl 0/0xfe action pass",
		"dev p0 chain 1 pref 49002 protocol ip flower ip_proto 1 action pass",
		"dev p0 chain 1 pref 49002 protocol ip flower ip_ttl 0/0xfe action pass",
	}
	if strings.Join(guards, "\n") != strings.Join(wantGuards, "\n") {
		t.Errorf("guards\n got %s\nwant %s", strings.Join(guards, "\n"), strings.Join(wantGuards, "\n"))
	}
}

func TestDeriveIPv6HopLimit(t *testing.T) {
	pols, states := tunnel("2001:db8:16::/48", "2001:db8:48::/48", 100, p0)
	fw := forwards(derive(withMTU(fastpath.Snapshot{Policies: pols, States: states}), ports(false)))
	if len(fw) != 1 || !fw[0].IPv6 || !strings.Contains(fw[0].String(), "munge ip6 hoplimit add 0xff") || strings.Contains(fw[0].String(), "csum") {
		t.Fatalf("IPv6 outbound: %v", fw)
	}
}

// Each case removes the forward for a reason the XDP program would also
// pass the packets (or some of them) to the kernel.
func TestDeriveLeavesUncertainSelectorsAlone(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(p []xfrm.Policy, s []xfrm.State) ([]xfrm.Policy, []xfrm.State, bool)
		why  string
	}{
		{"software SA during a rekey", func(p []xfrm.Policy, s []xfrm.State) ([]xfrm.Policy, []xfrm.State, bool) {
			sa := s[0]
			sa.SPI, sa.Offload = 999, nil
			return p, append(s, sa), false
		}, ""},
		{"a better block policy overlapping", func(p []xfrm.Policy, s []xfrm.State) ([]xfrm.Policy, []xfrm.State, bool) {
			return append(p, xfrm.Policy{Index: 5000, Dir: xfrm.DirOut, Priority: 10, Action: xfrm.ActionBlock,
				Sel: xfrm.Selector{Src: netip.MustParsePrefix("16.0.1.0/24"), Dst: netip.MustParsePrefix("48.0.0.0/8"), Proto: 6, DPort: 22, DPortMask: 0xffff}}), s, false
		}, "overlap"},
		{"a worse block policy inside is harmless", func(p []xfrm.Policy, s []xfrm.State) ([]xfrm.Policy, []xfrm.State, bool) {
			return append(p, xfrm.Policy{Index: 5000, Dir: xfrm.DirOut, Priority: 1000, Action: xfrm.ActionBlock,
				Sel: xfrm.Selector{Src: netip.MustParsePrefix("16.0.1.0/24"), Dst: netip.MustParsePrefix("48.0.0.0/8")}}), s, true
		}, ""},
		{"equal priority", func(p []xfrm.Policy, s []xfrm.State) ([]xfrm.Policy, []xfrm.State, bool) {
			return append(p, xfrm.Policy{Index: 5000, Dir: xfrm.DirOut, Priority: 100, Action: xfrm.ActionBlock,
				Sel: xfrm.Selector{Src: netip.MustParsePrefix("16.0.0.0/8"), Dst: netip.MustParsePrefix("48.0.0.0/24")}}), s, false
		}, "overlap"},
		{"a sub policy anywhere over it", func(p []xfrm.Policy, s []xfrm.State) ([]xfrm.Policy, []xfrm.State, bool) {
			return append(p, xfrm.Policy{Index: 5000, Dir: xfrm.DirOut, Priority: 500, Sub: true,
				Sel: xfrm.Selector{Src: netip.MustParsePrefix("0.0.0.0/0"), Dst: netip.MustParsePrefix("0.0.0.0/0")}}), s, false
		}, "uncertain"},
		{"a marked policy", func(p []xfrm.Policy, s []xfrm.State) ([]xfrm.Policy, []xfrm.State, bool) {
			p[0].Mark, p[0].MarkMask = 1, 1
			return p, s, false
		}, "uncertain"},
		{"an IN policy overlapping the OUT selector", func(p []xfrm.Policy, s []xfrm.State) ([]xfrm.Policy, []xfrm.State, bool) {
			return append(p, xfrm.Policy{Index: 5000, Dir: xfrm.DirIn, Priority: 500,
				Sel: xfrm.Selector{Src: netip.MustParsePrefix("16.0.0.0/24"), Dst: netip.MustParsePrefix("48.0.0.0/24")}}), s, false
		}, "IN policy"},
		{"a FWD policy that needs an SA", func(p []xfrm.Policy, s []xfrm.State) ([]xfrm.Policy, []xfrm.State, bool) {
			p[1].Tmpls[0].Optional = false
			return p, s, false
		}, "fwd-check"},
		{"FWD default block without fwd-out", func(p []xfrm.Policy, s []xfrm.State) ([]xfrm.Policy, []xfrm.State, bool) {
			return append(p[:1], p[2:]...), s, false
		}, "fwd-check"},
		{"ICMP-only policy", func(p []xfrm.Policy, s []xfrm.State) ([]xfrm.Policy, []xfrm.State, bool) {
			p[0].Sel.Proto = 1
			return p, s, false
		}, "icmp"},
		{"route out of another port", func(p []xfrm.Policy, s []xfrm.State) ([]xfrm.Policy, []xfrm.State, bool) {
			p[0].Sel.Dst = netip.MustParsePrefix("49.0.0.0/16")
			return p, s, false
		}, "route"},
		{"prefix with more specific routes", func(p []xfrm.Policy, s []xfrm.State) ([]xfrm.Policy, []xfrm.State, bool) {
			p[0].Sel.Dst = netip.MustParsePrefix("32.0.0.0/3")
			return p, s, false
		}, "route"},
		{"a selector with martian addresses", func(p []xfrm.Policy, s []xfrm.State) ([]xfrm.Policy, []xfrm.State, bool) {
			p[0].Sel.Dst = netip.MustParsePrefix("0.0.0.0/0")
			return p, s, false
		}, "martian"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pols, states := tunnel("16.0.0.0/16", "48.0.0.0/16", 100, p0)
			pols, states, keep := tc.edit(pols, states)
			snap := withMTU(fastpath.Snapshot{Policies: pols, States: states, FwdDefaultBlock: tc.name == "FWD default block without fwd-out"})
			res := derive(snap, ports(false))
			fw := forwards(res)
			if keep {
				if len(fw) != 1 {
					t.Fatalf("want the rule kept, got %v (skips %v)", fw, res.Skips)
				}
				return
			}
			if len(fw) != 0 {
				t.Fatalf("want no rule, got %v", fw)
			}
			if tc.why != "" && (len(res.Skips) == 0 || !strings.Contains(res.Skips[0].Reason, tc.why)) {
				t.Errorf("skip reason %v, want one containing %q", res.Skips, tc.why)
			}
		})
	}
}

func TestDeriveInboundNeedsOptIn(t *testing.T) {
	pols, states := tunnel("16.0.0.0/16", "48.0.0.0/16", 100, p0)
	ps := ports(true)
	ps[0].InboundForward = false
	for _, r := range forwards(derive(withMTU(fastpath.Snapshot{Policies: pols, States: states}), ps)) {
		if r.Dir == Inbound {
			t.Fatalf("inbound rule without inbound: forward: %s", r.String())
		}
	}
}

func TestOverlapsAndCovers(t *testing.T) {
	sel := func(src, dst string, proto uint8, dport, mask uint16) xfrm.Selector {
		return xfrm.Selector{Src: netip.MustParsePrefix(src), Dst: netip.MustParsePrefix(dst), Proto: proto, DPort: dport, DPortMask: mask}
	}
	a := sel("10.0.0.0/8", "20.0.0.0/8", 0, 0, 0)
	b := sel("10.1.0.0/16", "20.0.0.0/24", 6, 80, 0xffff)
	c := sel("10.1.0.0/16", "20.0.0.0/24", 17, 80, 0xffff)
	d := sel("10.1.0.0/16", "20.0.0.0/24", 6, 443, 0xffff)
	if !overlaps(a, b) || !covers(a, b) || covers(b, a) || overlaps(b, c) || overlaps(b, d) || !overlaps(b, b) {
		t.Fatal("overlap/cover logic wrong")
	}
	if overlaps(a, sel("2001:db8::/32", "::/0", 0, 0, 0)) {
		t.Fatal("families overlap")
	}
}

func (fakeRouter) Source(netip.Prefix, int) ([]netip.Addr, string) { return nil, "" }

// ownRouter is fakeRouter on a host that owns 16.0.0.254.
type ownRouter struct{ fakeRouter }

func (ownRouter) Source(src netip.Prefix, _ int) ([]netip.Addr, string) {
	if a := netip.MustParseAddr("16.0.0.254"); src.Contains(a) {
		return []netip.Addr{a}, ""
	}
	return nil, ""
}

// An own address inside the source prefix gets a guard in front of the
// forward: the kernel drops it as a source, so the NIC must not carry it.
func TestDeriveGuardsOwnSources(t *testing.T) {
	pols, states := tunnel("16.0.0.0/16", "48.0.0.0/16", 100, p0)
	res := Derive(Input{Views: fastpath.PolicyViews(withMTU(fastpath.Snapshot{Policies: pols, States: states})), Ports: ports(false), Router: ownRouter{}})
	var guard string
	for _, r := range res.Rules {
		if r.Kind == KindSrcGuard {
			guard = r.String()
		}
	}
	want := "dev p0 chain 0 pref 49001 protocol 802.1Q flower vlan_id 502 vlan_ethtype ip src_ip 16.0.0.254/32 action pass"
	if guard != want || len(forwards(res)) != 1 {
		t.Fatalf("guard %q, want %q; rules %v", guard, want, res.Rules)
	}
}

// withMTU gives every SA of s strongSwan's esp=aes128gcm16 and a 1500-byte
// route (SA MTU 1446 over IPv4, 1426 over IPv6), as the mirror would.
func withMTU(s fastpath.Snapshot) fastpath.Snapshot {
	s.States = append([]xfrm.State(nil), s.States...)
	s.RouteMTU = map[fastpath.Endpoints]int{}
	for i := range s.States {
		if s.States[i].Alg == (xfrm.StateAlg{}) {
			s.States[i].Alg = xfrm.StateAlg{AEAD: "rfc4106(gcm(aes))", ICVBits: 128}
		}
		s.RouteMTU[fastpath.Endpoints{Src: s.States[i].Src, Dst: s.States[i].Dst}] = 1500
	}
	return s
}

// TestOutboundPolicesAtSAMTU: an outbound rule lets through exactly what
// fits the SA (act_police counts the 14-byte Ethernet header at ingress),
// and larger packets go to the kernel, which sends frag-needed / PTB. It
// policed at the next hop's link MTU before (1500: 1447-1486-byte packets
// were forwarded past the SA).
func TestOutboundPolicesAtSAMTU(t *testing.T) {
	for _, tc := range []struct {
		name    string
		route   int
		alg     xfrm.StateAlg
		police  int
		skipped bool
	}{
		{"gcm128 over a 1500 route", 1500, xfrm.StateAlg{AEAD: "rfc4106(gcm(aes))", ICVBits: 128}, 1446 + 14, false},
		{"gcm64 over a 1500 route", 1500, xfrm.StateAlg{AEAD: "rfc4106(gcm(aes))", ICVBits: 64}, 1454 + 14, false},
		{"cbc-sha256 over a locked 1400", 1400, xfrm.StateAlg{Crypt: "cbc(aes)", Auth: "hmac(sha256)", AuthTruncBits: 128}, 1326 + 14, false}, // 1400-44-16 = 1340, &^15 = 1328, -2
		{"NAT-T", 1500, xfrm.StateAlg{AEAD: "rfc4106(gcm(aes))", ICVBits: 128, Encap: 2}, 1438 + 14, false},
		{"unknown algorithm", 1500, xfrm.StateAlg{AEAD: "rfc9999(new)", ICVBits: 128}, 0, true},
		{"no route to the peer", 0, xfrm.StateAlg{AEAD: "rfc4106(gcm(aes))", ICVBits: 128}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pols, states := tunnel("16.0.0.0/16", "48.0.0.0/16", 100, p0)
			snap := fastpath.Snapshot{Policies: pols, States: states, RouteMTU: map[fastpath.Endpoints]int{}}
			for i := range snap.States {
				snap.States[i].Alg = tc.alg
				if tc.route > 0 {
					snap.RouteMTU[fastpath.Endpoints{Src: states[i].Src, Dst: states[i].Dst}] = tc.route
				}
			}
			var got []int
			for _, r := range forwards(derive(snap, ports(false))) {
				if r.Dir == Outbound {
					got = append(got, r.MTU)
				}
			}
			switch {
			case tc.skipped && len(got) != 0:
				t.Errorf("want no outbound rule, got police mtu %v", got)
			case !tc.skipped && (len(got) != 1 || got[0] != tc.police):
				t.Errorf("police mtu %v, want [%d]", got, tc.police)
			}
		})
	}
}
