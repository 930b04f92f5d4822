package fastpath

import (
	"bytes"
	"testing"

	"github.com/cilium/ebpf"

	"sluice/internal/kernel"
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
	h, f, err := e.dp.CacheStats()
	if err != nil {
		e.t.Fatal(err)
	}
	return h, f
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

	t.Run("a policy change is never answered from the cache", func(t *testing.T) {
		blocked := g.snap
		blocked.Policies = append([]kernel.Policy{}, g.snap.Policies...)
		for i := range blocked.Policies {
			if blocked.Policies[i].Index == g.tunnel.Index {
				blocked.Policies[i].Action = kernel.ActionBlock
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
}
