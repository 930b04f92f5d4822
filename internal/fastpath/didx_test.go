// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"math/rand"
	"net/netip"
	"testing"

	"sluice/internal/kernel/xfrm"
)

// didxRuleOf returns the rule number + 1 the index holds for dst's /24, 0
// for none.
func didxRuleOf(x didx, dst netip.Addr) uint32 {
	v := beWord(addrWords(dst)[0]) >> 8
	b := x.blocks[v>>8]
	if b == 0 {
		return 0
	}
	return x.slots[b-1][v&255]
}

// TestBuildDidx checks which /24s the compiler indexes: only those that
// exactly one entry's destination meets, never one that a shorter prefix
// (below didxMinPlen) or a second entry also meets.
func TestBuildDidx(t *testing.T) {
	w := 7
	pol := func(dir xfrm.Dir, src, dst string, prio uint32) xfrm.Policy {
		return tunnelPolicy(dir, src, dst, prio, "123.2.0.1", 1, w)
	}
	cases := []struct {
		name string
		pols []xfrm.Policy
		want map[string]bool // destination -> indexed
	}{
		{"strongSwan: OUT to the remote /24, IN and FWD back", []xfrm.Policy{
			pol(xfrm.DirOut, "16.0.0.0/8", "48.0.1.0/24", 100),
			pol(xfrm.DirIn, "48.0.1.0/24", "16.0.0.0/8", 100),
			pol(xfrm.DirFwd, "48.0.1.0/24", "16.0.0.0/8", 100),
		}, map[string]bool{"48.0.1.9": true, "48.0.2.9": false, "16.0.0.1": false}},
		{"OUT and FWD with one selector share an entry", []xfrm.Policy{
			pol(xfrm.DirOut, "16.0.0.0/8", "48.0.1.0/24", 100),
			pol(xfrm.DirFwd, "16.0.0.0/8", "48.0.1.0/24", 100),
		}, map[string]bool{"48.0.1.9": true}},
		{"two sources to one /24: contested", []xfrm.Policy{
			pol(xfrm.DirOut, "16.0.0.0/8", "48.0.1.0/24", 100),
			pol(xfrm.DirOut, "17.0.0.0/8", "48.0.1.0/24", 100),
		}, map[string]bool{"48.0.1.9": false}},
		{"a /32 inside another entry's /16", []xfrm.Policy{
			pol(xfrm.DirOut, "16.0.0.0/8", "48.0.0.0/16", 100),
			pol(xfrm.DirOut, "16.0.0.0/8", "48.0.7.7/32", 100),
		}, map[string]bool{"48.0.1.9": true, "48.0.255.1": true, "48.0.7.1": false, "48.1.0.1": false}},
		{"a prefix shorter than /16 leaves what it meets to the tuples", []xfrm.Policy{
			pol(xfrm.DirOut, "16.0.0.0/8", "48.0.1.0/24", 100),
			pol(xfrm.DirOut, "16.0.0.0/8", "49.0.1.0/24", 100),
			pol(xfrm.DirOut, "16.0.0.0/8", "48.0.0.0/12", 300),
		}, map[string]bool{"48.0.1.9": false, "49.0.1.9": true}},
		{"a default route policy leaves everything to the tuples", []xfrm.Policy{
			pol(xfrm.DirOut, "16.0.0.0/8", "48.0.1.0/24", 100),
			pol(xfrm.DirOut, "16.0.0.0/8", "0.0.0.0/0", 300),
		}, map[string]bool{"48.0.1.9": false}},
		{"IPv6 is never indexed", []xfrm.Policy{
			tunnelPolicy(xfrm.DirOut, "fd00::/16", "2001:db8:48:1::/64", 100, "2001:db8:f::99", 1, w),
			pol(xfrm.DirOut, "16.0.0.0/8", "48.0.1.0/24", 100),
		}, map[string]bool{"48.0.1.9": true}},
	}
	for _, c := range cases {
		tb, err := Compile(Snapshot{Policies: c.pols})
		if err != nil {
			t.Fatal(err)
		}
		for dst, want := range c.want {
			if got := didxRuleOf(tb.Didx, addr(dst)) != 0; got != want {
				t.Errorf("%s: %s indexed %v, want %v", c.name, dst, got, want)
			}
		}
	}
}

// Narrow destinations, so that the index decides many packets of the
// random sets below (the model test's prefixes, /0 and /8 among them,
// leave nearly every /24 to the tuples), and a few wide ones.
var (
	narrowRem4 = []string{"48.1.2.0/24", "48.1.2.3/32", "48.1.2.0/30", "48.1.0.0/16", "48.1.9.0/24", "48.2.0.0/16", "48.3.0.0/24", "48.2.0.0/20"}
	narrowLan4 = []string{"10.1.2.0/24", "10.1.2.3/32", "10.1.0.0/16", "10.2.0.0/16", "10.3.0.0/24", "10.1.9.0/24"}
	wide4      = []string{"48.0.0.0/12", "10.0.0.0/8", "0.0.0.0/0"}
)

// TestDestinationIndexKeepsEveryVerdict compares the program with the
// kernel model (as TestClassifierMatchesKernelModel does) on random IPv4
// policy sets whose destinations are mostly narrow enough to index, with
// the model test's packets and hostile frames, and demands that the index
// decided packets both ways: selector matched (a policy's verdict) and
// not (no policy). With the rule's source check taken out of
// classify_direct4, or a wide prefix's /24s indexed, it fails.
func TestDestinationIndexKeepsEveryVerdict(t *testing.T) {
	e := newTestEnv(t)
	seed := modelSeed(t)
	rounds := modelRounds(t, 24)
	const packets = 60
	indexed := map[bool]int{} // by whether the model names a policy
	for round := 0; round < rounds; round++ {
		r := rand.New(rand.NewSource(seed + int64(round)))
		inboundOK := round%3 == 0
		e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB, InboundForward: inboundOK})
		s := randomSnapshot(r, false, 3+r.Intn(6), e.wan)
		for i := range s.Policies {
			p := &s.Policies[i]
			dsts := narrowRem4
			if p.Dir != xfrm.DirOut {
				dsts = narrowLan4
			}
			if r.Intn(12) == 0 {
				dsts = wide4
			}
			p.Sel.Dst = pfx(pick(r, dsts))
		}
		s.FwdDefaultBlock = round%5 == 4
		e.apply(s)
		tb, err := Compile(s)
		if err != nil {
			t.Fatal(err)
		}
		offloadDev := func(p *xfrm.Policy) int { return packetOffloadDevice(p, s.States) }
		check := func(i int, pkt Packet, inbound bool, hostileShape bool) {
			g := modelGateway{ingress: e.lan, ingressMAC: e.lanMAC, inboundOK: inboundOK, offloadDev: offloadDev,
				own: []netip.Addr{addr("10.0.0.254"), addr("123.0.0.1"), addr("10.9.0.254")}, routeOf: e.routeOf}
			if inbound {
				g.ingress, g.ingressMAC = e.wan, e.wanMAC
			}
			frame, shape := []byte(nil), "aimed"
			if hostileShape {
				frame, shape = hostile(r, pkt, false, g.ingressMAC)
			} else {
				pkt.DstMAC = g.ingressMAC
				var err error
				if frame, err = pkt.Marshal(); err != nil {
					t.Fatal(err)
				}
			}
			want := modelDecide(s, frame, g)
			got := e.explainFrame(frame, g.ingress)
			if got.Reason != want {
				t.Fatalf("seed %d round %d packet %d (%s): %s -> %s proto %d ports %d/%d type %d ttl %d on %s: program says %s (policy %d), model says %s\nframe % x\npolicies:\n%s",
					seed, round, i, shape, pkt.Src, pkt.Dst, pkt.Proto, pkt.SPort, pkt.DPort, pkt.ICMPType, pkt.TTL,
					map[bool]string{true: "wan", false: "lan"}[inbound], got.ReasonName, got.PolicyIndex, want, frame, describe(s.Policies))
			}
			if didxRuleOf(tb.Didx, pkt.Dst) != 0 && (len(got.MatchedDirs) != 0 || got.Reason == ReasonNoPolicy) {
				indexed[len(got.MatchedDirs) != 0]++
			}
		}
		for i := 0; i < packets; i++ {
			pkt, inbound := randomPacket(r, false)
			check(i, pkt, inbound, true)
		}
		// and one packet aimed inside each policy's selector, so that
		// every round has packets the index's rules match
		for i := range s.Policies {
			check(packets+i, aimedPacket(&s.Policies[i]), s.Policies[i].Dir != xfrm.DirOut, false)
		}
	}
	t.Logf("packets the index decided: %d matching its rule, %d not", indexed[true], indexed[false])
	if rounds >= 24 && (indexed[true] < 10 || indexed[false] < 20) {
		t.Fatalf("the index decided %d matching and %d other packets: the generator no longer tests it", indexed[true], indexed[false])
	}
}

// aimedPacket is a packet p's selector matches: addresses inside its
// prefixes (not the first, which may be a network's own), its protocol
// and ports.
func aimedPacket(p *xfrm.Policy) Packet {
	inside := func(pf netip.Prefix) netip.Addr {
		if pf.Bits() == 32 {
			return pf.Addr()
		}
		return pf.Masked().Addr().Next()
	}
	pkt := Packet{Src: inside(p.Sel.Src), Dst: inside(p.Sel.Dst), Proto: p.Sel.Proto, SPort: p.Sel.SPort, DPort: p.Sel.DPort, TTL: 64}
	switch pkt.Proto {
	case 0:
		pkt.Proto, pkt.SPort, pkt.DPort = 17, 1234, 80
	case 1:
		pkt.ICMPType, pkt.SPort = uint8(p.Sel.SPort), 0
	}
	return pkt
}

// TestDestinationIndexCountsThePolicy: a first packet the index decides
// is counted against its policy's counter slot, which Apply assigns after
// Compile built the index (the rules carried the slot-less values of
// Compile's entries before writeDidx copied them at write time: 0
// counted).
func TestDestinationIndexCountsThePolicy(t *testing.T) {
	e := newTestEnv(t)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	if err := e.dp.SetCounters(true); err != nil {
		t.Fatal(err)
	}
	if err := e.dp.SetFlowCacheOff(true); err != nil {
		t.Fatal(err)
	}
	var s Snapshot
	var outs []xfrm.Policy
	for i, remote := range []string{"48.0.1.0/24", "48.0.2.0/24", "48.0.3.0/24"} {
		out := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", remote, 100, "123.2.0.1", uint32(i+1), e.wan)
		in := tunnelPolicy(xfrm.DirIn, remote, "10.0.0.0/8", 100, "123.2.0.1", uint32(i+1), e.wan)
		s.Policies = append(s.Policies, out, in)
		s.States = append(s.States, saFor(out, e.wan), saFor(in, e.wan))
		outs = append(outs, out)
	}
	e.apply(s)
	tb, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	pkt := udp("10.0.0.5", "48.0.2.9", 64)
	if didxRuleOf(tb.Didx, pkt.Dst) == 0 {
		t.Fatal("48.0.2.0/24 is not indexed: the test no longer takes the index")
	}
	e.runTimes(pkt, e.lan, 3)
	if c := e.countsByIndex()[outs[1].Index]; c.Packets != 3 {
		t.Fatalf("OUT policy %d counted %+v, want 3 packets", outs[1].Index, c)
	}
}
