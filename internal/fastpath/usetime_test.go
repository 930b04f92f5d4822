// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"testing"

	"sluice/internal/kernel/xfrm"
)

// TestUseTimeHandover: with use times on, the first forwardable packet of
// each policy in each route epoch goes to the kernel (which stamps the
// policy's use time as it forwards it), the rest are forwarded, from the
// flow cache too; a new epoch (every second, from the daemon) hands over one
// more. Off (a static policy source), nothing is handed over. Without the
// handover every packet was forwarded and the kernel never saw one.
func TestUseTimeHandover(t *testing.T) {
	e := newTestEnv(t)
	g := newGateway(e)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	e.apply(g.snap)
	a, b := udp("10.0.0.5", "48.0.1.9", 64), udp("10.0.0.6", "48.0.1.10", 64) // one policy, two flows
	verdicts := func(ps ...Packet) []string {
		var out []string
		for _, p := range ps {
			ret, _ := e.liveRun(p, e.lan)
			out = append(out, ActionName(ret))
		}
		return out
	}
	want := func(got []string, w ...string) {
		t.Helper()
		for i := range w {
			if i >= len(got) || got[i] != w[i] {
				t.Fatalf("verdicts %v, want %v", got, w)
			}
		}
	}
	want(verdicts(a, a, b), "XDP_REDIRECT", "XDP_REDIRECT", "XDP_REDIRECT") // off by default
	if err := e.dp.SetUseTime(true); err != nil {
		t.Fatal(err)
	}
	if err := e.dp.BumpRouteEpoch(); err != nil {
		t.Fatal(err)
	}
	want(verdicts(a, a, a, b), "XDP_PASS", "XDP_REDIRECT", "XDP_REDIRECT", "XDP_REDIRECT")
	if d := e.explain(a, e.lan); d.ReasonName != "forward-out" {
		t.Errorf("explain: %s, want forward-out (explain reports the forward, not the handover)", d.ReasonName)
	}
	if err := e.dp.BumpRouteEpoch(); err != nil {
		t.Fatal(err)
	}
	want(verdicts(b, a, b), "XDP_PASS", "XDP_REDIRECT", "XDP_REDIRECT")

	// another policy has its own handover
	other := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.9.0.0/16", 1, "123.0.0.9", 9, e.wan)
	s := g.snap
	s.Policies = append(append([]xfrm.Policy(nil), s.Policies...), other)
	s.States = append(append([]xfrm.State(nil), s.States...), saFor(other, e.wan))
	s.RouteMTU = routeMTUs(s.States, 1500)
	e.apply(s)
	c := udp("10.0.0.5", "48.9.0.1", 64)
	want(verdicts(c, c, a), "XDP_PASS", "XDP_REDIRECT", "XDP_REDIRECT")

	// An opted-in inbound forward hands over the first packet too, for
	// the FWD policy's use time (the kernel's FWD check stamps it).
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB, InboundForward: true})
	in := udp("48.0.1.7", "10.1.0.5", 64)
	want(verdicts2(e, e.wan, in, in), "XDP_PASS", "XDP_REDIRECT")
}

// verdicts2 runs packets arriving on ingress and names the verdicts.
func verdicts2(e *testEnv, ingress int, ps ...Packet) []string {
	var out []string
	for _, p := range ps {
		ret, _ := e.liveRun(p, ingress)
		out = append(out, ActionName(ret))
	}
	return out
}
