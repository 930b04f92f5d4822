// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"sluice/internal/kernel/xfrm"
)

// liveRun runs the live program (not the explain twin) once and returns
// its verdict and output frame.
func (e *testEnv) liveRun(p Packet, ingress int) (uint32, []byte) {
	e.t.Helper()
	frame, err := p.Marshal()
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]byte, len(frame)+64)
	var ret uint32
	e.in(func() {
		opts := &ebpf.RunOptions{Data: frame, DataOut: out,
			Context: xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ingress)}}
		ret, err = e.dp.objs.XdpFastpath.Run(opts)
		out = opts.DataOut
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return ret, out
}

func (e *testEnv) cacheStats() (uint64, uint64) {
	e.t.Helper()
	c, err := e.dp.CacheStats()
	if err != nil {
		e.t.Fatal(err)
	}
	return c.Hits, c.Fills
}

// TestFlowCache: a cached forward is replayed byte for byte, and never
// survives what it was derived from — the policies, the routes, or a
// packet larger than the FIB accepted.
func TestFlowCache(t *testing.T) {
	e := newTestEnv(t)
	g := newGateway(e)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	e.apply(g.snap)
	small := udp("10.0.0.5", "48.0.1.9", 64)

	ret1, out1 := e.liveRun(small, e.lan)
	ret2, out2 := e.liveRun(small, e.lan)
	if h, f := e.cacheStats(); ret1 != XDPRedirect || ret2 != XDPRedirect || h != 1 || f != 1 {
		t.Fatalf("verdicts %s, %s; cache hits %d fills %d; want two redirects, the second from the cache",
			ActionName(ret1), ActionName(ret2), h, f)
	}
	if !bytes.Equal(out1, out2) {
		t.Fatalf("the cached forward rewrote the frame differently:\nfull   % x\ncached % x", out1[:34], out2[:34])
	}

	t.Run("IPv4 and IPv6 forwards are cached, each family in its own table", func(t *testing.T) {
		v6 := udp("fd00::5", "2001:db8:48:1::9", 64)
		h0, f0 := e.cacheStats()
		ret1, out1 := e.liveRun(v6, e.lan)
		ret2, out2 := e.liveRun(v6, e.lan)
		if h, f := e.cacheStats(); ret1 != XDPRedirect || ret2 != XDPRedirect || h != h0+1 || f != f0+1 {
			t.Fatalf("IPv6: verdicts %s, %s; hits +%d fills +%d; want two redirects, the second from the cache",
				ActionName(ret1), ActionName(ret2), h-h0, f-f0)
		}
		if !bytes.Equal(out1, out2) {
			t.Fatalf("the cached IPv6 forward rewrote the frame differently:\nfull   % x\ncached % x", out1[:54], out2[:54])
		}
		count := func(m *ebpf.Map) int {
			n := 0
			var v fastpathFpFlow
			k := make([]byte, m.KeySize())
			for it := m.Iterate(); it.Next(&k, &v); {
				n++
			}
			return n
		}
		if n4, n6 := count(e.dp.objs.FlowCache4), count(e.dp.objs.FlowCache); n4 != 1 || n6 != 1 {
			t.Fatalf("entries: %d IPv4, %d IPv6; want one each (the IPv4 flow above and this one)", n4, n6)
		}
	})
	t.Run("a policy change is never answered from the cache", func(t *testing.T) {
		blocked := g.snap
		blocked.Policies = append([]xfrm.Policy{}, g.snap.Policies...)
		for i := range blocked.Policies {
			if blocked.Policies[i].Index == g.tunnel.Index {
				blocked.Policies[i].Action = xfrm.ActionBlock
			}
		}
		e.apply(blocked)
		if ret, _ := e.liveRun(small, e.lan); ret != XDPPass {
			t.Fatalf("after the policy became block: %s, want XDP_PASS", ActionName(ret))
		}
		e.apply(g.snap)
	})
	t.Run("a route change is never answered from the cache", func(t *testing.T) {
		e.liveRun(small, e.lan) // refill under the restored policies
		ip(t, "-n", e.name, "route", "replace", "48.0.1.0/24", "via", "10.0.0.1")
		if err := e.dp.BumpRouteEpoch(); err != nil {
			t.Fatal(err)
		}
		if ret, _ := e.liveRun(small, e.lan); ret != XDPPass {
			t.Fatalf("after 48.0.1.0/24 moved to the LAN (not the SA's device): %s, want XDP_PASS", ActionName(ret))
		}
		ip(t, "-n", e.name, "route", "del", "48.0.1.0/24")
		if err := e.dp.BumpRouteEpoch(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("IPv4 hits are answered by this CPU's exact-match slot", func(t *testing.T) {
		// The slots are per CPU: keep both runs on one.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var one, all unix.CPUSet
		if err := unix.SchedGetaffinity(0, &all); err != nil {
			t.Fatal(err)
		}
		one.Set(0)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			t.Fatal(err)
		}
		defer unix.SchedSetaffinity(0, &all)

		flow := udp("10.0.0.7", "48.0.1.9", 64)
		_, full := e.liveRun(flow, e.lan)
		slot := e.emcSlotOf(flow)
		cfg, err := e.dp.config()
		if err != nil {
			t.Fatal(err)
		}
		wanPort, err := e.dp.PortOf(e.wan)
		if err != nil {
			t.Fatal(err)
		}
		if slot == nil || slot.Flow.Gen != cfg.Gen || wanPort == 0 || slot.Flow.Port != wanPort {
			t.Fatalf("after a fill: exact-match slot %+v, want the flow's forward to wan0 (ifindex %d, redirect port %d)", slot, e.wan, wanPort)
		}
		// Without its flow_cache4 entry, only the slot can answer.
		k := make([]byte, e.dp.objs.FlowCache4.KeySize())
		var v fastpathFpFlow
		for it := e.dp.objs.FlowCache4.Iterate(); it.Next(&k, &v); {
			e.dp.objs.FlowCache4.Delete(k)
		}
		h0, f0 := e.cacheStats()
		ret, cached := e.liveRun(flow, e.lan)
		if h, f := e.cacheStats(); ret != XDPRedirect || h != h0+1 || f != f0 {
			t.Fatalf("flow_cache4 emptied: %s, hits +%d, fills +%d; want a redirect from the exact-match slot", ActionName(ret), h-h0, f-f0)
		}
		if !bytes.Equal(full, cached) {
			t.Fatalf("the exact-match forward rewrote the frame differently:\nfull   % x\ncached % x", full[:34], cached[:34])
		}
	})
	t.Run("an LRU entry whose tag is another key's is not replayed", func(t *testing.T) {
		// What a reader sees when another CPU recycled the element it
		// looked up for a different flow.
		flow := udp("10.0.0.8", "48.0.1.9", 64)
		e.liveRun(flow, e.lan)
		var k fastpathFpFlowKey4
		var v fastpathFpFlow
		found := false
		for it := e.dp.objs.FlowCache4.Iterate(); it.Next(&k, &v); {
			if k.Src == binary.NativeEndian.Uint32(flow.Src.AsSlice()) {
				found = true
				break
			}
		}
		if !found {
			t.Fatal("no flow_cache4 entry for 10.0.0.8 after a forward")
		}
		v.KeyTag ^= 1
		if err := e.dp.objs.FlowCache4.Update(&k, &v, ebpf.UpdateExist); err != nil {
			t.Fatal(err)
		}
		e.clearExactMatch()
		h0, f0 := e.cacheStats()
		if ret, _ := e.liveRun(flow, e.lan); ret != XDPRedirect {
			t.Fatalf("verdict %s, want a forward decided in full", ActionName(ret))
		}
		if h, f := e.cacheStats(); h != h0 || f != f0+1 {
			t.Fatalf("entry with a foreign tag: hits +%d, fills +%d; want it ignored and refilled", h-h0, f-f0)
		}
		e.clearExactMatch()
		if e.liveRun(flow, e.lan); func() bool { h, _ := e.cacheStats(); return h != h0+1 }() {
			t.Fatalf("the refilled entry (right tag) was not a hit")
		}
	})
	t.Run("a larger packet the FIB accepted is cached for its flow too", func(t *testing.T) {
		flow := udp("10.0.0.6", "48.0.1.9", 64)
		bigger := flow
		bigger.Payload = 600
		e.liveRun(flow, e.lan)
		if ret, _ := e.liveRun(bigger, e.lan); ret != XDPRedirect {
			t.Fatalf("600-byte payload: %s", ActionName(ret))
		}
		h0, f0 := e.cacheStats()
		if ret, _ := e.liveRun(bigger, e.lan); ret != XDPRedirect {
			t.Fatalf("600-byte payload again: %s", ActionName(ret))
		}
		if h, f := e.cacheStats(); h != h0+1 || f != f0 {
			t.Fatalf("the second larger packet: hits +%d, fills +%d; want a hit (the first one raised the flow's proven size)", h-h0, f-f0)
		}
	})
	t.Run("a packet larger than the flow has proven to fit takes the full path", func(t *testing.T) {
		ip(t, "-n", e.name, "link", "set", "wan0", "mtu", "1000")
		e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
		if ret, _ := e.liveRun(small, e.lan); ret != XDPRedirect {
			t.Fatalf("small packet: %s", ActionName(ret))
		}
		big := small
		big.Payload = 1400
		if ret, _ := e.liveRun(big, e.lan); ret != XDPPass {
			t.Fatalf("1,400-byte payload through a 1,000-byte MTU: %s, want XDP_PASS (the kernel answers with frag-needed)", ActionName(ret))
		}
		h0, _ := e.cacheStats()
		if ret, _ := e.liveRun(small, e.lan); ret != XDPRedirect {
			t.Fatalf("small packet again: %s", ActionName(ret))
		}
		if h, _ := e.cacheStats(); h != h0+1 {
			t.Fatalf("the small packet after the big one was not a cache hit (%d -> %d)", h0, h)
		}
	})
	t.Run("keys carry ports exactly when a policy or the FIB looks at them", func(t *testing.T) {
		// g.snap blocks TCP 443 to 48.0.3.0/24, which g.wide forwards
		// otherwise: two connections between the same hosts differ.
		e.apply(g.snap)
		if l4, _ := e.dp.FlowCacheKeysL4(); !l4 {
			t.Fatalf("a port selector is mirrored, but flow-cache keys ignore ports")
		}
		web := Packet{Src: addr("10.0.0.5"), Dst: addr("48.0.3.9"), Proto: 6, SPort: 40000, DPort: 80, TTL: 64, Payload: 18}
		if ret, _ := e.liveRun(web, e.lan); ret != XDPRedirect {
			t.Fatalf("TCP 80 to 48.0.3.9: %s, want a forward (policy wide)", ActionName(ret))
		}
		tls := web
		tls.DPort = 443
		if ret, _ := e.liveRun(tls, e.lan); ret != XDPPass {
			t.Fatalf("TCP 443 between the same hosts, after TCP 80 was cached: %s, want XDP_PASS (blocked)", ActionName(ret))
		}

		// Without the port selector, one entry serves every connection
		// between two hosts.
		addrOnly := g.snap
		addrOnly.Policies = nil
		for _, p := range g.snap.Policies {
			if p.Index != g.block.Index {
				addrOnly.Policies = append(addrOnly.Policies, p)
			}
		}
		e.apply(addrOnly)
		if l4, _ := e.dp.FlowCacheKeysL4(); l4 {
			t.Fatalf("no policy selects on protocol or ports, yet keys carry them")
		}
		e.liveRun(small, e.lan)
		h0, f0 := e.cacheStats()
		other := small
		other.SPort, other.DPort = 999, 53
		if ret, _ := e.liveRun(other, e.lan); ret != XDPRedirect {
			t.Fatalf("another connection between the same hosts: %s", ActionName(ret))
		}
		if h, f := e.cacheStats(); h != h0+1 || f != f0 {
			t.Fatalf("another connection between cached hosts: hits %d -> %d, fills %d -> %d; want one hit", h0, h, f0, f)
		}

		// Once the FIB may look at ports (a rule, an L4 multipath
		// hash), keys carry them again and old entries expire.
		if changed, err := e.dp.SetFIBUsesL4(true); err != nil || !changed {
			t.Fatalf("SetFIBUsesL4(true): changed %v, %v", changed, err)
		}
		if l4, _ := e.dp.FlowCacheKeysL4(); !l4 {
			t.Fatalf("the FIB uses ports, yet keys ignore them")
		}
		h1, f1 := e.cacheStats()
		e.liveRun(other, e.lan)
		if h, f := e.cacheStats(); h != h1 || f != f1+1 {
			t.Fatalf("after the FIB started to use ports: hits %d -> %d, fills %d -> %d; want a fill, no hit", h1, h, f1, f)
		}
		if _, err := e.dp.SetFIBUsesL4(false); err != nil {
			t.Fatal(err)
		}
		e.apply(g.snap)
	})
}

// TestFlowCacheInbound: an opted-in inbound forward is cached like an
// outbound one — replayed byte for byte, VLAN push included — and the
// cache never outlives the opt-in or the hairpin next hop.
func TestFlowCacheInbound(t *testing.T) {
	e := newTestEnv(t)
	g := newGateway(e)
	e.apply(g.snap)
	decrypted := udp("48.0.1.7", "10.1.0.5", 64)
	hairpin := []Iface{{Ifindex: e.lan, L2: L2FIB},
		{Ifindex: e.lan1, L2: L2FIB, VLANID: 504, ParentIfindex: e.lan},
		{Ifindex: e.wan, L2: L2FIB, InboundForward: true, HairpinIfindex: e.lan1,
			HairpinDstMAC: lanRouterMAC, HairpinSrcMAC: e.lanMAC}}
	e.setIfaces(hairpin...)

	h0, f0 := e.cacheStats()
	ret1, out1 := e.liveRun(decrypted, e.wan)
	ret2, out2 := e.liveRun(decrypted, e.wan)
	if h, f := e.cacheStats(); ret1 != XDPRedirect || ret2 != XDPRedirect || h != h0+1 || f != f0+1 {
		t.Fatalf("verdicts %s, %s; hits %d -> %d, fills %d -> %d; want two redirects, the second from the cache",
			ActionName(ret1), ActionName(ret2), h0, h, f0, f)
	}
	if !bytes.Equal(out1, out2) {
		t.Fatalf("the cached inbound forward rewrote the frame differently:\nfull   % x\ncached % x", out1[:38], out2[:38])
	}
	if binary.BigEndian.Uint16(out2[12:]) != 0x8100 || binary.BigEndian.Uint16(out2[14:])&0xfff != 504 {
		t.Fatalf("cached replay lost the VLAN push: % x", out2[12:18])
	}

	// The operator withdraws the opt-in: from the next packet on, the
	// kernel's FWD check decides again.
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	if ret, _ := e.liveRun(decrypted, e.wan); ret != XDPPass {
		t.Fatalf("after inbound: forward was withdrawn: %s, want XDP_PASS", ActionName(ret))
	}
	// Opted in again without a hairpin: the FIB's next hop, untagged.
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB, InboundForward: true})
	e.liveRun(decrypted, e.wan)
	if ret, out := e.liveRun(decrypted, e.wan); ret != XDPRedirect || binary.BigEndian.Uint16(out[12:]) != 0x0800 {
		t.Fatalf("without the hairpin: %s, ethertype % x; want an untagged redirect", ActionName(ret), out[12:14])
	}
}

// TestFlowCacheTurnsItselfOffWhenThrashing: traffic whose flows never
// repeat makes every packet a fill; after a window of that, the CPU stops
// using the cache (packets are counted as bypassed, a repeat is not a
// hit), and turns it back on after the pause.
func TestFlowCacheTurnsItselfOffWhenThrashing(t *testing.T) {
	e := newTestEnv(t)
	g := newGateway(e)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	e.apply(g.snap)

	// The gate is per CPU: keep every run on CPU 0.
	onCPU0 := func(fn func()) {
		e.in(func() {
			var old unix.CPUSet
			if err := unix.SchedGetaffinity(0, &old); err != nil {
				t.Fatal(err)
			}
			var one unix.CPUSet
			one.Set(0)
			if err := unix.SchedSetaffinity(0, &one); err != nil {
				t.Fatal(err)
			}
			defer unix.SchedSetaffinity(0, &old)
			fn()
		})
	}
	run := func(p Packet) uint32 {
		frame, err := p.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		ret, err := e.dp.objs.XdpFastpath.Run(&ebpf.RunOptions{Data: frame,
			Context: xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(e.lan)}})
		if err != nil {
			t.Fatal(err)
		}
		return ret
	}
	stats := func() CacheCounters {
		c, err := e.dp.CacheStats()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	repeat := udp("10.0.0.5", "48.0.1.9", 64)
	onCPU0(func() {
		run(repeat)
		if ret := run(repeat); ret != XDPRedirect {
			t.Fatalf("warm-up: %s", ActionName(ret))
		}
		// 17,000 flows, each seen once: all fills, no hits.
		for i := 0; i < 17000; i++ {
			if ret := run(udp(fmt.Sprintf("10.2.%d.%d", i/256, i%256), "48.0.1.9", 64)); ret != XDPRedirect {
				t.Fatalf("flow %d: %s", i, ActionName(ret))
			}
		}
		before := stats()
		for i := 0; i < 3; i++ {
			if ret := run(repeat); ret != XDPRedirect {
				t.Fatalf("with the cache off: %s, want the full path's redirect", ActionName(ret))
			}
		}
		after := stats()
		if after.Bypassed-before.Bypassed != 3 || after.Hits != before.Hits || after.Fills != before.Fills {
			t.Fatalf("after a thrashing window: %+v -> %+v; want 3 bypassed, no hit, no fill", before, after)
		}
	})
	time.Sleep(150 * time.Millisecond) // FP_CACHE_OFF_NS is 100 ms
	onCPU0(func() {
		before := stats()
		run(repeat)
		run(repeat)
		// The warm-up's entry is still valid: two hits.
		if after := stats(); after.Hits != before.Hits+2 || after.Bypassed != before.Bypassed {
			t.Fatalf("after the pause: %+v -> %+v; want the cache back on (two hits, nothing bypassed)", before, after)
		}
	})
}

// emcSlotOf returns the exact-match slot holding IPv4 packet p's flow on
// any CPU, or nil.
func (e *testEnv) emcSlotOf(p Packet) *fastpathFpEmc {
	e.t.Helper()
	src, dst := p.Src.As4(), p.Dst.As4()
	var k uint32
	var v fastpathFpEmc
	for it := e.dp.objs.FlowEmc.Iterate(); it.Next(&k, &v); {
		if v.Key.Ifindex != 0 && v.Key.Src == binary.NativeEndian.Uint32(src[:]) && v.Key.Dst == binary.NativeEndian.Uint32(dst[:]) {
			return &v
		}
	}
	return nil
}

// clearExactMatch empties every CPU's exact-match slots, so that the next
// IPv4 packet consults flow_cache4.
func (e *testEnv) clearExactMatch() {
	e.t.Helper()
	var k uint32
	var v, empty fastpathFpEmc
	for it := e.dp.objs.FlowEmc.Iterate(); it.Next(&k, &v); {
		if v.Key.Ifindex != 0 {
			if err := e.dp.objs.FlowEmc.Update(k, &empty, ebpf.UpdateExist); err != nil {
				e.t.Fatal(err)
			}
		}
	}
}
