// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"math/rand"
	"testing"

	"github.com/cilium/ebpf"
)

// TestQuickPassKeepsEveryVerdict runs the live program, whose quick pass
// (fwd_dsts) sends what no forwardable policy covers to the kernel before
// the exact checks, against the explain instance, which always takes the
// full decision, on the random policy sets and hostile frames of the model
// test: the action must be the same for every frame, and the quick pass
// must have passed some of them. Inbound forwarding is on in half the
// rounds, so the IN and FWD destinations' bits are tested too (with them
// left out, it fails: an inbound forward is passed).
func TestQuickPassKeepsEveryVerdict(t *testing.T) {
	e := newTestEnv(t)
	seed := modelSeed(t)
	rounds := modelRounds(t, 16)
	const policies, packets = 24, 60
	quick, forwards, forwardsIn := 0, 0, 0
	for round := 0; round < rounds; round++ {
		r := rand.New(rand.NewSource(seed + int64(round)))
		v6 := round%2 == 1
		inboundOK := round%4 < 2
		e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB, InboundForward: inboundOK})
		s := randomSnapshot(r, v6, policies, e.wan)
		e.apply(s)
		before, err := e.dp.ReasonCounts()
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < packets; i++ {
			pkt, inbound := randomPacket(r, v6)
			ingress, mac := e.lan, e.lanMAC
			if inbound {
				ingress, mac = e.wan, e.wanMAC
			}
			frame, shape := hostile(r, pkt, v6, mac)
			want := e.explainFrame(frame, ingress)
			var got uint32
			e.in(func() {
				got, err = e.dp.objs.XdpFastpath.Run(&ebpf.RunOptions{Data: append([]byte(nil), frame...),
					Context: xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ingress)}})
			})
			if err != nil {
				t.Fatal(err)
			}
			if got != want.Action {
				t.Fatalf("seed %d round %d packet %d (%s): %s -> %s proto %d on ifindex %d: live program %s, full decision %s (%s)\nframe % x\npolicies:\n%s",
					seed, round, i, shape, pkt.Src, pkt.Dst, pkt.Proto, ingress, ActionName(got), want.ActionName, want.ReasonName, frame, describe(s.Policies))
			}
			if want.Reason.Forwarded() {
				forwards++
			}
			if want.Reason == ReasonForwardIn {
				forwardsIn++
			}
		}
		after, err := e.dp.ReasonCounts()
		if err != nil {
			t.Fatal(err)
		}
		for _, ifindex := range []int{e.lan, e.wan} {
			quick += int(after[ifindex][ReasonNotForwardable] - before[ifindex][ReasonNotForwardable])
		}
	}
	t.Logf("%d quick passes, %d forwards (%d inbound)", quick, forwards, forwardsIn)
	if quick == 0 || forwards == 0 || forwardsIn == 0 {
		t.Fatalf("%d quick passes, %d forwards, %d inbound: the generator no longer tests the quick pass", quick, forwards, forwardsIn)
	}
}
