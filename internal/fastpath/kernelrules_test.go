// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"

	"sluice/internal/kernel/xfrm"
)

// The cases of issue 12, each one a packet the kernel drops or decides
// otherwise and the fast path once forwarded. Every one must go to the
// kernel (XDP_PASS) with the reason named; TestKernelAgreesWithModelAndProgram
// checks the same rules against the real kernel with random sets.
func TestKernelRulesOfIssue12(t *testing.T) {
	e := newTestEnv(t)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	w := e.wan
	out := tunnelPolicy(xfrm.DirOut, "10.1.0.0/16", "48.2.0.0/16", 1, "123.2.0.1", 1, w)
	subBlock := xfrm.Policy{Index: 0x101, Dir: xfrm.DirOut, Priority: 100, Action: xfrm.ActionBlock, Sub: true,
		Sel: xfrm.Selector{Src: pfx("10.1.1.0/24"), Dst: pfx("48.2.0.0/16")}}
	fwdOther := tunnelPolicy(xfrm.DirFwd, "10.5.0.0/16", "10.6.0.0/16", 1, "123.2.0.2", 2, 0)
	out6 := tunnelPolicy(xfrm.DirOut, "fd00:1::/32", "2001:db8:48::/48", 1, "2001:db8:f::99", 3, w)
	subBlock6 := xfrm.Policy{Index: 0x109, Dir: xfrm.DirFwd, Priority: 100, Action: xfrm.ActionBlock, Sub: true,
		Sel: xfrm.Selector{Src: pfx("fd00:1:1::/48"), Dst: pfx("2001:db8:48::/48")}}
	// OUT udp 1234 -> 80 allow (offloaded) prio 5 over OUT any block prio 10.
	portAllow := tunnelPolicy(xfrm.DirOut, "10.3.0.0/16", "48.3.0.0/16", 5, "123.2.0.3", 4, w)
	portAllow.Sel.Proto, portAllow.Sel.SPort, portAllow.Sel.SPortMask, portAllow.Sel.DPort, portAllow.Sel.DPortMask = 17, 1234, 0xffff, 80, 0xffff
	anyBlock := xfrm.Policy{Index: 0x111, Dir: xfrm.DirOut, Priority: 10, Action: xfrm.ActionBlock,
		Sel: xfrm.Selector{Src: pfx("10.3.0.0/16"), Dst: pfx("48.3.0.0/16")}}
	portAllow6 := tunnelPolicy(xfrm.DirOut, "fd00:3::/32", "2001:db8:48:3::/64", 5, "2001:db8:f::99", 5, w)
	portAllow6.Sel.Proto, portAllow6.Sel.SPort, portAllow6.Sel.SPortMask, portAllow6.Sel.DPort, portAllow6.Sel.DPortMask = 17, 1234, 0xffff, 80, 0xffff
	anyBlock6 := xfrm.Policy{Index: 0x119, Dir: xfrm.DirOut, Priority: 10, Action: xfrm.ActionBlock,
		Sel: xfrm.Selector{Src: pfx("fd00:3::/32"), Dst: pfx("2001:db8:48:3::/64")}}
	// ICMP echo (type 8 as source port) allowed, everything else blocked.
	echoAllow := tunnelPolicy(xfrm.DirOut, "10.4.0.0/16", "48.4.0.0/16", 5, "123.2.0.4", 6, w)
	echoAllow.Sel.Proto, echoAllow.Sel.SPort, echoAllow.Sel.SPortMask = 1, 8, 0xffff
	echoBlock := xfrm.Policy{Index: 0x121, Dir: xfrm.DirOut, Priority: 10, Action: xfrm.ActionBlock,
		Sel: xfrm.Selector{Src: pfx("10.4.0.0/16"), Dst: pfx("48.4.0.0/16")}}
	zeroAllow := tunnelPolicy(xfrm.DirOut, "10.4.0.0/16", "48.4.0.0/16", 7, "123.2.0.4", 7, w)
	zeroAllow.Sel.SPort, zeroAllow.Sel.SPortMask = 0, 0xffff // ports 0 (any protocol)
	ownOut := tunnelPolicy(xfrm.DirOut, "10.0.0.0/24", "48.9.0.0/16", 1, "123.2.0.9", 8, w)
	var s Snapshot
	for _, p := range []xfrm.Policy{ownOut, out, subBlock, fwdOther, out6, subBlock6, portAllow, anyBlock, portAllow6, anyBlock6, echoAllow, echoBlock, zeroAllow} {
		s.Policies = append(s.Policies, p)
		if len(p.Tmpls) > 0 && p.Dir == xfrm.DirOut {
			s.States = append(s.States, saFor(p, w))
		}
	}
	e.apply(s)

	udp4 := func(src, dst string) Packet {
		return Packet{Src: addr(src), Dst: addr(dst), Proto: 17, SPort: 1234, DPort: 80, TTL: 64}
	}
	quoted, _ := Packet{Src: addr("10.6.0.9"), Dst: addr("10.5.0.9"), Proto: 17, SPort: 7, DPort: 9, TTL: 64}.L3()
	quoted6, _ := Packet{Src: addr("2001:db8:48::9"), Dst: addr("fd00:1::9"), Proto: 17, SPort: 7, DPort: 9, TTL: 64}.L3()
	frame := func(p Packet) []byte {
		f, err := p.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	withL4 := func(p Packet, v6 bool, n int) []byte { f := frame(p); setL4Len(f, v6, n); return f }
	mac := func(p Packet, m string) []byte { p.DstMAC, _ = net.ParseMAC(m); return frame(p) }
	cases := []struct {
		name, reason string
		frame        []byte
	}{
		// sanity: the rules below are about these shapes only
		{"plain outbound forwards", "forward-out", frame(udp4("10.1.2.1", "48.2.2.2"))},
		// 1. SUB before MAIN, whatever the priorities
		{"SUB block before MAIN allow", "uncertain", frame(udp4("10.1.1.1", "48.2.2.2"))},
		{"IPv6: FWD SUB block before the OUT allow", "uncertain", frame(udp4("fd00:1:1::1", "2001:db8:48::2"))},
		// 2. ICMP errors without a FWD match: the kernel checks the quote
		{"ICMP 3/1 quoting a FWD-policy flow", "icmp-error", frame(Packet{Src: addr("10.1.2.1"), Dst: addr("48.2.2.2"), Proto: 1, ICMPType: 3, ICMPCode: 1, TTL: 64, Quote: quoted})},
		{"ICMP 11 time exceeded", "icmp-error", frame(Packet{Src: addr("10.1.2.1"), Dst: addr("48.2.2.2"), Proto: 1, ICMPType: 11, TTL: 64, Quote: quoted})},
		{"ICMPv6 1 destination unreachable", "icmp-error", frame(Packet{Src: addr("fd00:1:2::1"), Dst: addr("2001:db8:48::2"), Proto: 58, ICMPType: 1, TTL: 64, Quote: quoted6})},
		{"ICMPv6 2 packet too big", "icmp-error", frame(Packet{Src: addr("fd00:1:2::1"), Dst: addr("2001:db8:48::2"), Proto: 58, ICMPType: 2, TTL: 64, Quote: quoted6})},
		{"ICMPv6 3 time exceeded", "icmp-error", frame(Packet{Src: addr("fd00:1:2::1"), Dst: addr("2001:db8:48::2"), Proto: 58, ICMPType: 3, TTL: 64, Quote: quoted6})},
		// 3. L4 fields past the IP length: the kernel sees ports 0
		{"UDP ports in the padding", "block", withL4(udp4("10.3.0.1", "48.3.0.1"), false, 2)},
		{"IPv6 UDP ports in the padding", "block", withL4(udp4("fd00:3::1", "2001:db8:48:3::1"), true, 2)},
		{"UDP ports within the IP length", "forward-out", frame(udp4("10.3.0.1", "48.3.0.1"))},
		// 4. ICMP type/code as ports: 8 bytes, own family only
		{"ICMP echo of 8 bytes", "forward-out", frame(Packet{Src: addr("10.4.0.1"), Dst: addr("48.4.0.1"), Proto: 1, ICMPType: 8, TTL: 64})},
		{"ICMP echo of 4 bytes: the kernel reads type 0", "forward-out by zero-port", withL4(Packet{Src: addr("10.4.0.1"), Dst: addr("48.4.0.1"), Proto: 1, ICMPType: 8, TTL: 64}, false, 4)},
		{"ICMPv6 in IPv4: ports 0", "forward-out", frame(Packet{Src: addr("10.4.0.1"), Dst: addr("48.4.0.1"), Proto: 58, ICMPType: 8, TTL: 64})},
		// 5. dropped by the kernel before XFRM is asked
		{"broadcast MAC", "l2-not-ours", mac(udp4("10.1.2.1", "48.2.2.2"), "ff:ff:ff:ff:ff:ff")},
		{"multicast MAC", "l2-not-ours", mac(udp4("10.1.2.1", "48.2.2.2"), "01:00:5e:00:00:01")},
		{"another host's MAC", "l2-not-ours", mac(udp4("10.1.2.1", "48.2.2.2"), "02:00:00:00:00:99")},
		{"bad IPv4 checksum", "bad-ip-header", func() []byte { f := frame(udp4("10.1.2.1", "48.2.2.2")); f[24] ^= 1; return f }()},
		{"IPv4 total length beyond the frame", "bad-ip-header", withL4(udp4("10.1.2.1", "48.2.2.2"), false, 200)},
		{"IPv4 total length below 20", "bad-ip-header", func() []byte {
			f := frame(udp4("10.1.2.1", "48.2.2.2"))
			binary.BigEndian.PutUint16(f[16:], 12)
			fixIPv4Checksum(f)
			return f
		}()},
		{"IPv6 payload length beyond the frame", "bad-ip-header", withL4(udp4("fd00:1:2::1", "2001:db8:48::2"), true, 200)},
		{"source 0.0.0.0", "martian", frame(udp4("0.0.0.0", "48.2.2.2"))},
		{"source 127.0.0.1", "martian", frame(udp4("127.0.0.1", "48.2.2.2"))},
		{"source multicast", "martian", frame(udp4("224.0.0.1", "48.2.2.2"))},
		{"source limited broadcast", "martian", frame(udp4("255.255.255.255", "48.2.2.2"))},
		{"destination multicast", "martian", frame(udp4("10.1.2.1", "239.1.1.1"))},
		{"IPv6 source link-local", "martian", frame(udp4("fe80::1", "2001:db8:48::2"))},
		{"IPv6 source multicast", "martian", frame(udp4("ff02::1", "2001:db8:48::2"))},
		{"a neighbour of the gateway as source", "forward-out", frame(udp4("10.0.0.5", "48.9.0.1"))},
		{"the gateway's own address as source", "martian", frame(udp4("10.0.0.254", "48.9.0.1"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := e.explainFrame(c.frame, e.lan)
			if c.reason == "forward-out by zero-port" {
				if d.Reason != ReasonForwardOut || d.PolicyIndex != zeroAllow.Index {
					t.Fatalf("got %s by policy %d, want forward-out by the port-0 policy %d", d.ReasonName, d.PolicyIndex, zeroAllow.Index)
				}
				return
			}
			if d.ReasonName != c.reason {
				t.Fatalf("got %s/%s (policy %d), want %s", d.ActionName, d.ReasonName, d.PolicyIndex, c.reason)
			}
			if c.reason != "forward-out" && d.Action != XDPPass {
				t.Fatalf("got %s, want XDP_PASS", d.ActionName)
			}
		})
	}
}

// A frame for another host, or an ICMP error, must not be answered by a
// cached forward of the same addresses.
func TestFlowCacheKeepsPerPacketRules(t *testing.T) {
	e := newTestEnv(t)
	g := newGateway(e)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	e.apply(g.snap)
	flow := udp("10.0.0.5", "48.0.1.9", 64)
	if ret, _ := e.liveRun(flow, e.lan); ret != XDPRedirect {
		t.Fatalf("first packet: %s, want a redirect", ActionName(ret))
	}
	if ret, _ := e.liveRun(flow, e.lan); ret != XDPRedirect {
		t.Fatalf("second packet: %s, want a redirect (from the cache)", ActionName(ret))
	}
	other := flow
	other.DstMAC = net.HardwareAddr{2, 0, 0, 0, 0, 0x99}
	if ret, _ := e.liveRun(other, e.lan); ret != XDPPass {
		t.Fatalf("same flow to another host's MAC: %s, want XDP_PASS", ActionName(ret))
	}
	icmpErr := Packet{Src: flow.Src, Dst: flow.Dst, Proto: 1, ICMPType: 3, TTL: 64}
	if ret, _ := e.liveRun(Packet{Src: flow.Src, Dst: flow.Dst, Proto: 1, ICMPType: 8, TTL: 64}, e.lan); ret != XDPRedirect {
		t.Fatalf("ICMP echo of the flow: %s, want a redirect", ActionName(ret))
	}
	if ret, _ := e.liveRun(icmpErr, e.lan); ret != XDPPass {
		t.Fatalf("ICMP error of a cached flow: %s, want XDP_PASS", ActionName(ret))
	}
}

// Two explain runs against one gateway's pinned maps (two `sluice gateway
// explain` processes) must each get their own answer.
func TestExplainConcurrentRuns(t *testing.T) {
	e := newTestEnv(t)
	g := newGateway(e)
	dir := bpffsDir(t)
	var daemon, a, b *Datapath
	e.in(func() {
		var err error
		if daemon, err = Load(LoadOptions{PinPath: dir}); err != nil {
			t.Fatal(err)
		}
		if err = daemon.SetIfaces([]Iface{{Ifindex: e.lan, L2: L2FIB}, {Ifindex: e.wan, L2: L2FIB}}); err != nil {
			t.Fatal(err)
		}
		tb, err := Compile(g.snap)
		if err != nil {
			t.Fatal(err)
		}
		if err = daemon.Apply(tb); err != nil {
			t.Fatal(err)
		}
		if a, err = Load(LoadOptions{PinPath: dir, AdoptOnly: true}); err != nil {
			t.Fatal(err)
		}
		if b, err = Load(LoadOptions{PinPath: dir, AdoptOnly: true}); err != nil {
			t.Fatal(err)
		}
	})
	defer daemon.Close()
	defer a.Close()
	defer b.Close()
	fwd, _ := udp("10.0.0.5", "48.0.1.9", 64).Marshal()
	none, _ := udp("10.0.0.5", "49.0.0.1", 64).Marshal()
	var wg sync.WaitGroup
	errs := make(chan string, 2)
	for _, run := range []struct {
		name  string
		dp    *Datapath
		frame []byte
		want  string
	}{{"A", a, fwd, "forward-out"}, {"B", b, none, "no-policy"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.in(func() {
				for n := 0; n < 500; n++ {
					d, err := run.dp.Explain(run.frame, e.lan)
					if err != nil {
						errs <- err.Error()
						return
					}
					if d.ReasonName != run.want {
						errs <- fmt.Sprintf("run %s, try %d: got %s, want %s (the other run's answer)", run.name, n, d.ReasonName, run.want)
						return
					}
				}
			})
		}()
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
}

// Reverse-path filtering: loose mode (2) is mirrored (a route back to the
// source through any device), strict mode (1) is left to the kernel.
func TestReversePathFilter(t *testing.T) {
	e := newTestEnv(t)
	w := e.wan
	p := tunnelPolicy(xfrm.DirOut, "0.0.0.0/0", "48.9.0.0/16", 1, "123.2.0.9", 1, w)
	e.apply(Snapshot{Policies: []xfrm.Policy{p}, States: []xfrm.State{saFor(p, w)}})
	routed := udp("10.1.0.5", "48.9.0.1", 64)   // 10/8 routes back via lan0
	unrouted := udp("11.1.0.5", "48.9.0.1", 64) // no route back at all
	for _, c := range []struct {
		mode             string
		routed, unrouted string
	}{
		{"0", "forward-out", "forward-out"},
		{"2", "forward-out", "rp-filter"},
		{"1", "rp-filter", "rp-filter"},
	} {
		ip(t, "netns", "exec", e.name, "sysctl", "-qw", "net.ipv4.conf.lan0.rp_filter="+c.mode)
		e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
		if d := e.explain(routed, e.lan); d.ReasonName != c.routed {
			t.Errorf("rp_filter %s, source with a route back: %s, want %s", c.mode, d.ReasonName, c.routed)
		}
		if d := e.explain(unrouted, e.lan); d.ReasonName != c.unrouted {
			t.Errorf("rp_filter %s, source without a route back: %s, want %s", c.mode, d.ReasonName, c.unrouted)
		}
	}
}
