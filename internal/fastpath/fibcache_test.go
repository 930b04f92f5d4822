// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"bytes"
	"net"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"sluice/internal/kernel"
)

// onOneCPU keeps the calling goroutine on CPU 0 until the test ends: the
// FIB cache's slots are per CPU, and a test that reads or writes a slot
// must run its packets where the slot is.
func onOneCPU(t *testing.T) {
	t.Helper()
	runtime.LockOSThread()
	var one, all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	one.Set(0)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.SchedSetaffinity(0, &all)
		runtime.UnlockOSThread()
	})
}

// followKernel does what the gateway daemon does on every route,
// neighbour and rule event (internal/gateway's followFIBDst, then the
// epoch bump of SetIfaces): ask the kernel whether FIB answers may be
// reused per destination, and expire every answer cached so far.
func (e *testEnv) followKernel() (dstOnly bool) {
	e.t.Helper()
	var why string
	e.in(func() { dstOnly, why = kernel.FIBByDestination() })
	if _, err := e.dp.SetFIBDstOnly(dstOnly); err != nil {
		e.t.Fatal(err)
	}
	if err := e.dp.BumpRouteEpoch(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Logf("FIB by destination: %v %s", dstOnly, why)
	return dstOnly
}

// fibEntry finds the FIB cache slot holding dst from the current route
// epoch (on any CPU), or returns -1.
func (e *testEnv) fibEntry(dst string) (uint32, fastpathFpFibc) {
	e.t.Helper()
	cfg, err := e.dp.config()
	if err != nil {
		e.t.Fatal(err)
	}
	want := addr(dst).As4()
	var k uint32
	var v fastpathFpFibc
	for it := e.dp.objs.FibCache.Iterate(); it.Next(&k, &v); {
		var got [4]byte
		nativeToBytes(v.Dst, got[:])
		if v.Ifindex != 0 && got == want && v.Epoch == cfg.RouteEpoch {
			return k, v
		}
	}
	return ^uint32(0), v
}

// nativeToBytes writes a __be32 held as a host integer as its 4 bytes.
func nativeToBytes(v uint32, b []byte) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// TestFIBCache: the first packet of a flow to a destination already seen
// takes the FIB's answer from fib_cache, and never once the kernel's answer
// may have changed: a neighbour's new MAC, a route moved elsewhere, a
// smaller route MTU, or a policy rule that routes by source. After each
// change the first packet carries the kernel's new answer (the explain
// instance, which always asks the FIB, agrees with every verdict).
func TestFIBCache(t *testing.T) {
	e := newTestEnv(t)
	onOneCPU(t)
	g := newGateway(e)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	e.apply(g.snap)
	// Every packet a first packet: the flow cache must not answer.
	if err := e.dp.SetFlowCacheOff(true); err != nil {
		t.Fatal(err)
	}
	if !e.followKernel() {
		t.Fatal("a namespace with the default rules and no multipath route: FIB answers must be reusable")
	}
	flow := udp("10.0.0.5", "48.0.1.9", 64)
	other := udp("10.0.0.6", "48.0.1.9", 64) // another flow to the same destination

	run := func(t *testing.T, what string, p Packet, want uint32, wantDMAC net.HardwareAddr) []byte {
		t.Helper()
		ret, out := e.liveRun(p, e.lan)
		d := e.explain(p, e.lan)
		if ret != want || d.Action != want {
			t.Fatalf("%s: live %s, full decision %s (%s); want %s", what, ActionName(ret), d.ActionName, d.ReasonName, ActionName(want))
		}
		if wantDMAC != nil && !bytes.Equal(out[:6], wantDMAC) {
			t.Fatalf("%s: sent to %s, want %s", what, net.HardwareAddr(out[:6]), wantDMAC)
		}
		return out
	}

	run(t, "first packet", flow, XDPRedirect, e.wanRtr)
	slot, ent := e.fibEntry("48.0.1.9")
	if slot == ^uint32(0) || ent.Rc != 0 || ent.Oif != uint32(e.wan) || ent.Mtu != 1500 {
		t.Fatalf("no FIB cache entry for 48.0.1.9 after the first packet (slot %d: %+v); want SUCCESS via wan0, MTU 1500", slot, ent)
	}
	// Proof that the next first packet is answered from the slot: mark it.
	marked := ent
	copy(marked.Dmac[:], []byte{0x02, 0xcc, 0, 0, 0, 0x99})
	if err := e.dp.objs.FibCache.Put(slot, marked); err != nil {
		t.Fatal(err)
	}
	run(t, "another flow to the same destination", other, XDPRedirect, net.HardwareAddr(marked.Dmac[:]))

	t.Run("neighbour change", func(t *testing.T) {
		newMAC := net.HardwareAddr{0x02, 0xbb, 0, 0, 0, 2}
		ip(t, "-n", e.name, "neigh", "replace", "123.0.0.254", "lladdr", newMAC.String(), "dev", "wan0", "nud", "permanent")
		defer ip(t, "-n", e.name, "neigh", "replace", "123.0.0.254", "lladdr", e.wanRtr.String(), "dev", "wan0", "nud", "permanent")
		e.followKernel()
		run(t, "first packet after the neighbour's MAC changed", other, XDPRedirect, newMAC)
		run(t, "the next one", flow, XDPRedirect, newMAC)
	})
	t.Run("route change", func(t *testing.T) {
		e.followKernel()
		run(t, "refill", flow, XDPRedirect, e.wanRtr)
		ip(t, "-n", e.name, "route", "replace", "48.0.1.0/24", "via", "10.0.0.1")
		e.followKernel()
		run(t, "first packet after 48.0.1.0/24 moved to the LAN (not the SA's device)", other, XDPPass, nil)
		ip(t, "-n", e.name, "route", "del", "48.0.1.0/24")
		e.followKernel()
		run(t, "first packet after the route went back", other, XDPRedirect, e.wanRtr)
	})
	t.Run("route MTU", func(t *testing.T) {
		// locked: forwarding ignores an unlocked route MTU (ip_mtu_from_fib_result)
		ip(t, "-n", e.name, "route", "replace", "48.0.1.0/24", "via", "123.0.0.254", "mtu", "lock", "1000")
		defer func() { ip(t, "-n", e.name, "route", "del", "48.0.1.0/24"); e.followKernel() }()
		e.followKernel()
		run(t, "small packet under a 1000-byte route", flow, XDPRedirect, e.wanRtr)
		if _, ent := e.fibEntry("48.0.1.9"); ent.Mtu != 1000 {
			t.Fatalf("cached MTU %d, want the route's 1000", ent.Mtu)
		}
		big := other
		big.Payload = 1100 // 1128 bytes of IP: above the route, below the SA's 1446
		run(t, "larger packet than the cached route's MTU", big, XDPPass, nil)
		if d := e.explain(big, e.lan); d.ReasonName != "mtu" {
			t.Fatalf("larger packet: %s, want mtu", d.ReasonName)
		}
	})
	t.Run("a policy rule that routes by source", func(t *testing.T) {
		ip(t, "-n", e.name, "route", "add", "48.0.0.0/8", "via", "10.0.0.1", "table", "100")
		ip(t, "-n", e.name, "rule", "add", "from", "10.0.0.5", "lookup", "100", "priority", "100")
		defer func() {
			ip(t, "-n", e.name, "rule", "del", "priority", "100")
			ip(t, "-n", e.name, "route", "flush", "table", "100")
			if !e.followKernel() {
				t.Error("the rule is gone: FIB answers must be reusable again")
			}
		}()
		if e.followKernel() {
			t.Fatal("a source rule: FIB answers must not be reused per destination")
		}
		// 10.0.0.6 is routed by main (WAN), 10.0.0.5 by table 100 (LAN):
		// an answer cached for the one must not serve the other.
		run(t, "from a source the rule does not select", other, XDPRedirect, e.wanRtr)
		run(t, "from the source the rule selects", flow, XDPPass, nil)
	})
}
