// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cilium/ebpf"
)

// cachedEntry is flow_cache4's entry for p's flow (the test fails without one).
func (e *testEnv) cachedEntry(p Packet) (fastpathFpFlowKey4, fastpathFpFlow) {
	e.t.Helper()
	src := p.Src.As4()
	var k fastpathFpFlowKey4
	var v fastpathFpFlow
	for it := e.dp.objs.FlowCache4.Iterate(); it.Next(&k, &v); {
		if k.Src == binary.NativeEndian.Uint32(src[:]) {
			return k, v
		}
	}
	e.t.Fatalf("no flow_cache4 entry for %s", p.Src)
	return k, v
}

// replant puts entry v back under key k as if it had been filled in the
// current generation and route epoch: what an entry filled from a packet
// decided just before the control plane's change, in the window before its
// epoch bump, looks like. Only the exact-match slots are emptied, so that
// flow_cache4 answers.
func (e *testEnv) replant(k fastpathFpFlowKey4, v fastpathFpFlow) {
	e.t.Helper()
	cfg, err := e.dp.config()
	if err != nil {
		e.t.Fatal(err)
	}
	v.Gen, v.Epoch = cfg.Gen, cfg.RouteEpoch
	if err := e.dp.objs.FlowCache4.Put(&k, &v); err != nil {
		e.t.Fatal(err)
	}
	e.clearExactMatch()
}

func (e *testEnv) portOf(ifindex int) uint32 {
	e.t.Helper()
	p, err := e.dp.PortOf(ifindex)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// TestRedirectPortReuse: a cached flow holds its egress's redirect port
// number, and the program redirects by the number alone. A number whose
// device left must never reach the device that came next, even from an
// entry the route epoch did not retire; a renumbered device's old entries
// are decided again.
func TestRedirectPortReuse(t *testing.T) {
	e := newTestEnv(t)
	g := newGateway(e)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	e.apply(g.snap)
	flow := udp("10.0.0.5", "48.0.1.9", 64)
	e.liveRun(flow, e.lan)
	if ret, _ := e.liveRun(flow, e.lan); ret != XDPRedirect {
		t.Fatalf("cached forward: %s, want XDP_REDIRECT", ActionName(ret))
	}
	k, stale := e.cachedEntry(flow)
	wanPort := e.portOf(e.wan)
	if wanPort == 0 || stale.Port != wanPort {
		t.Fatalf("cached entry's port %d, wan0's %d: want the same, not 0", stale.Port, wanPort)
	}
	frame, err := flow.Marshal()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a freed number is not the next device's", func(t *testing.T) {
		e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}) // wan0 leaves
		var dev uint32
		if err := e.dp.objs.TxPorts.Lookup(wanPort, &dev); !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatalf("wan0's port %d after it left: %v (device %d), want it empty", wanPort, err, dev)
		}
		e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.lan1, L2: L2FIB}) // lan1 comes
		if p := e.portOf(e.lan1); p == 0 || p == wanPort {
			t.Fatalf("lan1 got port %d; wan0 had %d: want a number of its own", p, wanPort)
		}
		e.replant(k, stale)
		ret, out := e.liveRun(flow, e.lan)
		if ret != XDPPass || !bytes.Equal(out, frame) {
			t.Fatalf("an entry holding wan0's old port: %s, frame changed %v; want XDP_PASS with the frame as it came",
				ActionName(ret), !bytes.Equal(out, frame))
		}
	})
	t.Run("a renumbered device's entries are decided again", func(t *testing.T) {
		e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
		back := e.portOf(e.wan)
		if back == 0 || back == wanPort {
			t.Fatalf("wan0 came back with port %d (had %d): want a new number", back, wanPort)
		}
		e.replant(k, stale)
		h0, f0 := e.cacheStats()
		if ret, _ := e.liveRun(flow, e.lan); ret != XDPRedirect {
			t.Fatalf("an entry holding wan0's old port, wan0 configured again: %s, want XDP_REDIRECT decided in full", ActionName(ret))
		}
		if h, f := e.cacheStats(); h != h0 || f != f0+1 {
			t.Fatalf("hits +%d fills +%d; want the stale entry ignored and refilled", h-h0, f-f0)
		}
		if _, v := e.cachedEntry(flow); v.Port != back {
			t.Fatalf("refilled entry's port %d, want wan0's new %d", v.Port, back)
		}
	})
	t.Run("a number the kernel emptied is not given back to the device", func(t *testing.T) {
		// The kernel empties a device's devmap entry when the device goes
		// away; another may come back under the same ifindex.
		now := e.portOf(e.wan)
		if err := e.dp.objs.TxPorts.Delete(now); err != nil {
			t.Fatal(err)
		}
		e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
		if p := e.portOf(e.wan); p == 0 || p == now {
			t.Fatalf("wan0's port after its entry was emptied: %d (was %d), want a new number", p, now)
		}
	})
}

// TestRedirectPortsAfterRestart: a daemon that adopts its predecessor's
// pinned maps (and with them its flow cache) numbers ports on from where
// the predecessor stopped, so it cannot hand a number the predecessor
// freed to another device.
func TestRedirectPortsAfterRestart(t *testing.T) {
	e := newTestEnv(t)
	dir := bpffsDir(t)
	load := func() *Datapath {
		var dp *Datapath
		e.in(func() {
			var err error
			if dp, err = Load(LoadOptions{PinPath: dir}); err != nil {
				t.Fatal(err)
			}
		})
		return dp
	}
	first := load()
	e.in(func() {
		if err := first.SetIfaces([]Iface{{Ifindex: e.lan}, {Ifindex: e.wan}}); err != nil {
			t.Fatal(err)
		}
	})
	given := map[uint32]bool{}
	for _, d := range []int{e.lan, e.wan} {
		p, err := first.PortOf(d)
		if err != nil || p == 0 {
			t.Fatalf("ifindex %d: port %d, %v", d, p, err)
		}
		given[p] = true
	}
	e.in(func() {
		if err := first.SetIfaces([]Iface{{Ifindex: e.lan}}); err != nil { // wan0's number freed
			t.Fatal(err)
		}
	})
	first.Close()
	next := load()
	defer next.Close()
	e.in(func() {
		if err := next.SetIfaces([]Iface{{Ifindex: e.lan}, {Ifindex: e.lan1}}); err != nil {
			t.Fatal(err)
		}
	})
	p, err := next.PortOf(e.lan1)
	if err != nil {
		t.Fatal(err)
	}
	if p == 0 || given[p] {
		t.Fatalf("after a restart lan1 got port %d; the predecessor had given out %v: want a number after those", p, given)
	}
}
