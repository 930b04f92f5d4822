// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"sluice/internal/kernel/xfrm"
)

// gatewayPolicies is a small strongSwan-like gateway: tunnels from the LAN
// (10.0.0.0/8) to remote sites in 48.0.0.0/8, with the shapes that break
// naive classifiers.
type gateway struct {
	snap                                      Snapshot
	tunnel, wide, narrowSrc, block, soft, in6 xfrm.Policy
	in, fwdIn, tieA, tieB, markP, local, out6 xfrm.Policy
}

func newGateway(e *testEnv) *gateway {
	g := &gateway{}
	w := e.wan
	g.tunnel = tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.1.0/24", 100, "123.2.0.1", 1, w)
	g.wide = tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.0.0/16", 200, "123.2.0.2", 2, w)
	// Longest dst, but only for 10.1/16 sources: others must fall back to wide.
	g.narrowSrc = tunnelPolicy(xfrm.DirOut, "10.1.0.0/16", "48.0.2.0/24", 50, "123.2.0.3", 3, w)
	g.block = xfrm.Policy{Index: 1001, Dir: xfrm.DirOut, Priority: 10, Action: xfrm.ActionBlock,
		Sel: xfrm.Selector{Src: pfx("10.0.0.0/8"), Dst: pfx("48.0.3.0/24"), Proto: 6, DPort: 443, DPortMask: 0xffff}}
	g.soft = tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.4.0/24", 100, "123.2.0.4", 4, 0) // software SA
	g.in = tunnelPolicy(xfrm.DirIn, "48.0.1.0/24", "10.0.0.0/8", 100, "123.2.0.1", 1, w)
	g.fwdIn = tunnelPolicy(xfrm.DirFwd, "48.0.1.0/24", "10.0.0.0/8", 100, "123.2.0.1", 1, 0)
	g.tieA = tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.5.0/24", 150, "123.2.0.5", 5, w)
	g.tieB = tunnelPolicy(xfrm.DirOut, "10.0.0.0/16", "48.0.5.0/24", 150, "123.2.0.6", 6, w)
	g.markP = tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.6.0/24", 1, "123.2.0.7", 7, w)
	g.markP.Mark, g.markP.MarkMask = 1, 0xff
	g.local = tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "123.0.0.1/32", 1, "123.2.0.8", 8, w)
	g.out6 = tunnelPolicy(xfrm.DirOut, "fd00::/16", "2001:db8:48:1::/64", 100, "2001:db8:f::99", 9, w)
	g.in6 = tunnelPolicy(xfrm.DirIn, "2001:db8:48:1::/64", "fd00::/16", 100, "2001:db8:f::99", 9, w)
	for _, p := range []xfrm.Policy{g.tunnel, g.wide, g.narrowSrc, g.block, g.soft, g.in, g.fwdIn, g.tieA, g.tieB, g.markP, g.local, g.out6, g.in6} {
		g.snap.Policies = append(g.snap.Policies, p)
		if len(p.Tmpls) > 0 && p.Dir != xfrm.DirFwd { // IN and FWD share the inbound SA
			dev := 0
			if p.Offload != nil {
				dev = p.Offload.Ifindex
			}
			g.snap.States = append(g.snap.States, saFor(p, dev))
		}
	}
	g.snap.RouteMTU = routeMTUs(g.snap.States, 1500)
	return g
}

// routeMTUs puts a route of MTU mtu under every SA.
func routeMTUs(states []xfrm.State, mtu int) map[Endpoints]int {
	m := map[Endpoints]int{}
	for _, st := range states {
		m[Endpoints{Src: st.Src, Dst: st.Dst}] = mtu
	}
	return m
}

func udp(src, dst string, ttl uint8) Packet {
	return Packet{Src: addr(src), Dst: addr(dst), Proto: 17, SPort: 1234, DPort: 5678, TTL: ttl, Payload: 18}
}

func TestDatapathVerdicts(t *testing.T) {
	e := newTestEnv(t)
	g := newGateway(e)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})

	// Before the control plane has written anything: everything to the kernel.
	if d := e.explain(udp("10.0.0.5", "48.0.1.9", 64), e.lan); d.Reason != ReasonNotReady || d.Action != XDPPass {
		t.Fatalf("before sync: %s/%s, want not-ready/XDP_PASS", d.ActionName, d.ReasonName)
	}
	e.apply(g.snap)

	tcp := func(src, dst string, dport uint16) Packet {
		return Packet{TTL: 64, Src: addr(src), Dst: addr(dst), Proto: 6, SPort: 40000, DPort: dport}
	}
	cases := []struct {
		name    string
		pkt     Packet
		ingress int
		reason  string
		action  uint32
		policy  uint32
	}{
		{"outbound match forwards to the offload device", udp("10.0.0.5", "48.0.1.9", 64), e.lan, "forward-out", XDPRedirect, g.tunnel.Index},
		{"hairpin: offload device is the ingress port", udp("10.0.0.5", "48.0.1.9", 64), e.wan, "forward-out", XDPTx, g.tunnel.Index},
		{"longest dst without src match falls back to a shorter dst", udp("10.2.0.1", "48.0.2.5", 64), e.lan, "forward-out", XDPRedirect, g.wide.Index},
		{"longest dst with src match wins", udp("10.1.0.1", "48.0.2.5", 64), e.lan, "forward-out", XDPRedirect, g.narrowSrc.Index},
		{"port selector: block policy goes to the kernel", tcp("10.0.0.5", "48.0.3.1", 443), e.lan, "block", XDPPass, g.block.Index},
		{"port selector: other port falls through", tcp("10.0.0.5", "48.0.3.1", 80), e.lan, "forward-out", XDPRedirect, g.wide.Index},
		{"proto selector: udp to 443 is not the tcp block", Packet{TTL: 64, Src: addr("10.0.0.5"), Dst: addr("48.0.3.1"), Proto: 17, SPort: 1, DPort: 443}, e.lan, "forward-out", XDPRedirect, g.wide.Index},
		{"software SA: the kernel encrypts", udp("10.0.0.5", "48.0.4.1", 64), e.lan, "not-offloaded", XDPPass, g.soft.Index},
		{"no policy", udp("10.0.0.5", "49.0.0.1", 64), e.lan, "no-policy", XDPPass, 0},
		{"equal priority overlap is the kernel's call", udp("10.0.0.5", "48.0.5.1", 64), e.lan, "uncertain", XDPPass, 0},
		{"no overlap when only one of the tied policies matches", udp("10.1.0.5", "48.0.5.1", 64), e.lan, "forward-out", XDPRedirect, g.tieA.Index},
		{"mark policy: XDP cannot see marks", udp("10.0.0.5", "48.0.6.1", 64), e.lan, "uncertain", XDPPass, g.markP.Index},
		{"TTL 1 goes to the kernel (ICMP time exceeded)", udp("10.0.0.5", "48.0.1.9", 1), e.lan, "ttl", XDPPass, 0},
		{"TTL 0 goes to the kernel", udp("10.0.0.5", "48.0.1.9", 0), e.lan, "ttl", XDPPass, 0},
		{"destination is local", udp("10.0.0.5", "123.0.0.1", 64), e.lan, "local", XDPPass, g.local.Index},
		{"spoofed cleartext on the WAN matching IN/FWD is passed", udp("48.0.1.7", "10.0.0.5", 64), e.wan, "inbound", XDPPass, g.fwdIn.Index},
		{"IKE", Packet{TTL: 64, Src: addr("10.0.0.5"), Dst: addr("48.0.1.9"), Proto: 17, SPort: 500, DPort: 500}, e.lan, "ike", XDPPass, 0},
		{"NAT-T", Packet{TTL: 64, Src: addr("10.0.0.5"), Dst: addr("48.0.1.9"), Proto: 17, SPort: 4500, DPort: 4500}, e.lan, "ike", XDPPass, 0},
		{"ESP itself", Packet{TTL: 64, Src: addr("123.2.0.1"), Dst: addr("123.0.0.1"), Proto: 50}, e.wan, "esp-ah", XDPPass, 0},
		{"IPv4 options", Packet{TTL: 64, Src: addr("10.0.0.5"), Dst: addr("48.0.1.9"), Proto: 17, IPOptions: true}, e.lan, "ip-options", XDPPass, 0},
		{"fragment", Packet{TTL: 64, Src: addr("10.0.0.5"), Dst: addr("48.0.1.9"), Proto: 17, Fragment: true}, e.lan, "fragment", XDPPass, 0},
		{"IPv6 outbound", udp("fd00::5", "2001:db8:48:1::9", 64), e.lan, "forward-out", XDPRedirect, g.out6.Index},
		{"IPv6 hop limit 1", udp("fd00::5", "2001:db8:48:1::9", 1), e.lan, "ttl", XDPPass, 0},
		{"IPv6 extension header", Packet{TTL: 64, Src: addr("fd00::5"), Dst: addr("2001:db8:48:1::9"), Proto: 17, IPv6Ext: true}, e.lan, "ipv6-ext", XDPPass, 0},
		{"IPv6 spoofed inbound", udp("2001:db8:48:1::7", "fd00::5", 64), e.wan, "inbound", XDPPass, g.in6.Index},
		{"ICMP echo follows the policy", Packet{TTL: 64, Src: addr("10.0.0.5"), Dst: addr("48.0.1.9"), Proto: 1, ICMPType: 8}, e.lan, "forward-out", XDPRedirect, g.tunnel.Index},
		{"VLAN tag unknown", Packet{TTL: 64, Src: addr("10.0.0.5"), Dst: addr("48.0.1.9"), Proto: 17, VLAN: 77}, e.lan, "vlan-unknown", XDPPass, 0},
		{"interface not configured", udp("10.0.0.5", "48.0.1.9", 64), e.lan1, "not-configured", XDPPass, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := e.explain(c.pkt, c.ingress)
			if d.ReasonName != c.reason || d.Action != c.action {
				t.Fatalf("got %s/%s (policy %d), want %s/%s", d.ActionName, d.ReasonName, d.PolicyIndex, ActionName(c.action), c.reason)
			}
			if c.policy != 0 && d.PolicyIndex != c.policy {
				t.Fatalf("decided by policy %d, want %d", d.PolicyIndex, c.policy)
			}
		})
	}
}

func TestExpiredLeaseFailsClosed(t *testing.T) {
	e := newTestEnv(t)
	g := newGateway(e)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	e.apply(g.snap)
	pkt := udp("10.0.0.5", "48.0.1.9", 64)
	if err := e.dp.RenewLease(time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := e.explain(pkt, e.lan); d.Reason != ReasonForwardOut {
		t.Fatalf("live lease: %s, want forward-out", d.ReasonName)
	}
	if err := e.dp.RenewLease(-time.Second); err != nil { // closed at once
		t.Fatal(err)
	}
	if d := e.explain(pkt, e.lan); d.Reason != ReasonNotReady || d.Action != XDPPass {
		t.Fatalf("expired lease: %s/%s, want XDP_PASS/not-ready", d.ActionName, d.ReasonName)
	}
	// A daemon that goes silent: nobody renews, the kernel's timer runs
	// out on its own. Renewing reopens.
	if err := e.dp.RenewLease(50 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := e.explain(pkt, e.lan); d.Reason != ReasonForwardOut {
		t.Fatalf("renewed lease: %s, want forward-out", d.ReasonName)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.explain(pkt, e.lan).Reason != ReasonNotReady {
		if time.Now().After(deadline) {
			t.Fatal("a 50 ms lease still open after 5 s: the timer never fired")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := e.dp.RenewLease(time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := e.explain(pkt, e.lan); d.Reason != ReasonForwardOut {
		t.Fatalf("lease renewed after it ran out: %s, want forward-out", d.ReasonName)
	}
}

// TestCountersPerInterfaceAndPolicy checks the live program's counters
// (explain never counts): per ingress interface and reason, per policy.
func TestCountersPerInterfaceAndPolicy(t *testing.T) {
	e := newTestEnv(t)
	g := newGateway(e)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	e.apply(g.snap)
	if err := e.dp.SetCounters(true); err != nil {
		t.Fatal(err)
	}
	run := func(p Packet, ingress, times int) {
		frame, _ := p.Marshal()
		e.in(func() {
			for i := 0; i < times; i++ {
				if _, err := e.dp.objs.XdpFastpath.Run(&ebpf.RunOptions{Data: frame,
					Context: xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ingress)}}); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	fwd := udp("10.0.0.5", "48.0.1.9", 64)
	run(fwd, e.lan, 3)
	run(udp("10.0.0.5", "49.0.0.1", 64), e.lan, 2)
	run(udp("48.0.1.7", "10.1.0.5", 64), e.wan, 4)
	rc, err := e.dp.ReasonCounts()
	if err != nil {
		t.Fatal(err)
	}
	// With counters on, every packet a policy may match takes the full
	// decision and is counted against it (the inbound ones: the FWD
	// policy's 4 packets below). No policy covers 49.0.0.1: it is passed
	// before the full decision, as not-forwardable (no policy to count).
	if rc[e.lan][ReasonForwardOut] != 3 || rc[e.lan][ReasonNotForwardable] != 2 || rc[e.wan][ReasonInbound] != 4 {
		t.Fatalf("reason counters %v; want lan forward-out 3, not-forwardable 2, wan inbound 4", rc)
	}
	pcs, err := e.dp.PolicyCounts()
	if err != nil {
		t.Fatal(err)
	}
	frame, _ := fwd.Marshal()
	got := map[uint32]PolicyCounter{}
	for _, c := range pcs {
		got[c.Index] = c
	}
	if c := got[g.tunnel.Index]; c.Packets != 3 || c.Bytes != 3*uint64(len(frame)) {
		t.Fatalf("policy %d counted %+v, want 3 packets of %d bytes", g.tunnel.Index, c, len(frame))
	}
	if c := got[g.fwdIn.Index]; c.Packets != 4 {
		t.Fatalf("FWD policy %d counted %+v, want 4 packets", g.fwdIn.Index, c)
	}
}

// TestDatapathRouteBranches covers the verdicts that depend on the FIB.
func TestDatapathRouteBranches(t *testing.T) {
	e := newTestEnv(t)
	wrongDev := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.8.0/24", 100, "123.2.0.9", 11, e.lan)
	onLink := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "123.0.0.77/32", 100, "123.2.0.10", 12, e.wan)
	wide := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.0.0/16", 200, "123.2.0.2", 2, e.wan)
	gre := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.9.0/24", 100, "123.2.0.11", 13, e.wan)
	snap := Snapshot{Policies: []xfrm.Policy{wrongDev, onLink, wide, gre}}
	for _, p := range snap.Policies {
		snap.States = append(snap.States, saFor(p, p.Offload.Ifindex))
	}
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB},
		Iface{Ifindex: e.lan1, L2: L2FIB, VLANID: 100, ParentIfindex: e.lan})
	e.apply(snap)
	ip(t, "-n", e.name, "link", "set", "wan0", "mtu", "1000")

	qinq := udp("10.9.0.5", "48.0.1.9", 64)
	qinq.VLAN = 100
	frame, _ := qinq.Marshal()
	frame[12], frame[13] = 0x88, 0xa8 // 802.1ad outer tag

	cases := []struct {
		name   string
		pkt    Packet
		frame  []byte
		reason string
	}{
		{"route leaves by another device than the SA's", udp("10.0.0.5", "48.0.8.1", 64), nil, "route-mismatch"},
		{"next hop not resolved", udp("10.0.0.5", "123.0.0.77", 64), nil, "no-nexthop"},
		{"larger than the egress MTU", Packet{TTL: 64, Src: addr("10.0.0.5"), Dst: addr("48.0.1.9"), Proto: 17, Payload: 1400}, nil, "mtu"},
		{"802.1ad tag maps to its VLAN child", Packet{}, frame, "forward-out"},
		{"GRE: the kernel reads its key as ports", Packet{TTL: 64, Src: addr("10.0.0.5"), Dst: addr("48.0.9.1"), Proto: 47}, nil, "uncertain"},
		{"IPv6 neighbour discovery", Packet{TTL: 255, Src: addr("fd00:a::1"), Dst: addr("fd00:a::fe"), Proto: 58, ICMPType: 135}, nil, "not-ip"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := c.frame
			if f == nil {
				var err error
				if f, err = c.pkt.Marshal(); err != nil {
					t.Fatal(err)
				}
			}
			var d *Decision
			var err error
			e.in(func() { d, err = e.dp.Explain(f, e.lan) })
			if err != nil {
				t.Fatal(err)
			}
			if d.ReasonName != c.reason {
				t.Fatalf("got %s/%s, want %s", d.ActionName, d.ReasonName, c.reason)
			}
			if d.Action != XDPPass && !d.Reason.Forwarded() {
				t.Fatalf("%s must not drop or abort: %s", c.reason, d.ActionName)
			}
		})
	}
}
