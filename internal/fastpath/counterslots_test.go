// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"testing"
	"time"

	"sluice/internal/kernel/xfrm"
)

// countsByIndex reads the per-policy counters into a map by kernel index.
func (e *testEnv) countsByIndex() map[uint32]PolicyCounter {
	e.t.Helper()
	pcs, err := e.dp.PolicyCounts()
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[uint32]PolicyCounter{}
	for _, c := range pcs {
		out[c.Index] = c
	}
	return out
}

func (e *testEnv) runTimes(p Packet, ingress, times int) {
	e.t.Helper()
	for i := 0; i < times; i++ {
		e.liveRun(p, ingress)
	}
}

// TestCacheEntriesOfOlderGenerations: with counters on, an `inbound` pass
// is replayed from the flow cache and counted against the policy the full
// decision names; a new generation (here: a better FWD policy) sends it
// back through the full decision; and no cache entry from two generations
// back, pass or forward, is fresh again. config.gen flipped 0, 1, 0
// before: the first set's entry was replayed under the third, counting a
// pass against a policy gone and forwarding under a block policy.
func TestCacheEntriesOfOlderGenerations(t *testing.T) {
	e := newTestEnv(t)
	g := newGateway(e)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	if err := e.dp.SetCounters(true); err != nil {
		t.Fatal(err)
	}
	e.apply(g.snap)
	in := udp("48.0.1.7", "10.1.0.5", 64)
	passStats := func() (uint64, uint64) {
		c, err := e.dp.CacheStats()
		if err != nil {
			t.Fatal(err)
		}
		return c.PassHits, c.PassFills
	}
	e.runTimes(in, e.wan, 5)
	if hits, fills := passStats(); hits != 4 || fills != 1 {
		t.Fatalf("pass hits %d, fills %d; want 4 replayed after 1 written", hits, fills)
	}
	if c := e.countsByIndex()[g.fwdIn.Index]; c.Packets != 5 {
		t.Fatalf("FWD policy %d counted %+v, want 5 packets", g.fwdIn.Index, c)
	}
	rc, err := e.dp.ReasonCounts()
	if err != nil {
		t.Fatal(err)
	}
	if rc[e.wan][ReasonInbound] != 5 {
		t.Fatalf("reasons %v; want wan inbound 5", rc[e.wan])
	}

	// A better FWD policy for the same traffic: the kernel now picks it.
	better := tunnelPolicy(xfrm.DirFwd, "48.0.1.0/24", "10.1.0.0/16", 50, "123.2.0.1", 1, 0)
	withBetter := g.snap
	withBetter.Policies = append(append([]xfrm.Policy(nil), g.snap.Policies...), better)
	e.apply(withBetter)
	e.runTimes(in, e.wan, 3)
	got := e.countsByIndex()
	if got[g.fwdIn.Index].Packets != 5 || got[better.Index].Packets != 3 {
		t.Fatalf("after the new generation: old FWD %+v, new FWD %+v; want 5 and 3", got[g.fwdIn.Index], got[better.Index])
	}

	// Two generations on with no packet between them: the entry written
	// under withBetter is two Applies old and must not be replayed.
	e.apply(g.snap)
	e.apply(g.snap)
	e.runTimes(in, e.wan, 2)
	got = e.countsByIndex()
	if got[g.fwdIn.Index].Packets != 7 || got[better.Index].Packets != 0 {
		t.Fatalf("two generations on: old FWD %+v, removed FWD %+v; want 7 and none", got[g.fwdIn.Index], got[better.Index])
	}

	// The same for a forward: cached, then its policy turned to block,
	// then another change within the same route epoch.
	out := udp("10.0.0.5", "48.0.1.9", 64)
	if ret, _ := e.liveRun(out, e.lan); ret == XDPPass {
		t.Fatal("the tunnel's first packet was not forwarded")
	}
	blocked := g.snap
	blocked.Policies = append([]xfrm.Policy(nil), g.snap.Policies...)
	for i := range blocked.Policies {
		if blocked.Policies[i].Index == g.tunnel.Index {
			blocked.Policies[i].Action = xfrm.ActionBlock
		}
	}
	e.apply(blocked)
	e.apply(blocked)
	if ret, _ := e.liveRun(out, e.lan); ret != XDPPass {
		t.Fatalf("a forward cached two generations ago was replayed under a block policy (verdict %d)", ret)
	}
}

// TestCounterSlotRestsBeforeReuse checks the slot allocator's reuse rule
// with a clock of its own: a released slot goes to another policy only
// after a later Apply and slotQuarantine, with every slot in use.
func TestCounterSlotRestsBeforeReuse(t *testing.T) {
	cs := counterSlots{loaded: true, byIndex: map[uint32]uint32{}, next: 1}
	tables := func(indexes ...uint32) *Tables {
		t := &Tables{Entries: map[fastpathFpPkey]fastpathFpPentry{}}
		for i, idx := range indexes {
			var e fastpathFpPentry
			e.Present, e.Dir[1].Index = 2, idx
			t.Entries[fastpathFpPkey{Tuple: uint8(i)}] = e
		}
		return t
	}
	t0 := time.Unix(1000, 0)
	cs.assign(tables(8, 16), t0)
	old := cs.byIndex[8]
	cs.release(tables(16), t0)
	tb := tables(16, 24)
	cs.assign(tb, t0.Add(slotQuarantine/2))
	if s := cs.byIndex[24]; s == old || s == 0 {
		t.Fatalf("a slot released %v ago was reused (%d)", slotQuarantine/2, s)
	}
	cs.release(tb, t0.Add(slotQuarantine/2))
	cs.assign(tables(16, 24, 32), t0.Add(2*slotQuarantine))
	if s := cs.byIndex[32]; s != old {
		t.Fatalf("the rested slot %d was not reused: got %d", old, s)
	}
	cs.next = maxCounterSlots
	cs.assign(tables(16, 24, 32, 40), t0.Add(3*slotQuarantine))
	if _, ok := cs.byIndex[40]; ok {
		t.Fatal("a slot was given out beyond maxCounterSlots")
	}
}

// TestCounterSlotsAcrossRecompilesAndRestarts: a policy keeps its counter
// slot, and its counts, for as long as it stays in the tables; a policy
// that leaves is no longer reported, and its slot is not handed to a
// policy that arrives right after (which starts from zero). A daemon that
// adopts the pinned maps keeps each policy's slot and counts
// (policy_slots records the owners) and gives new policies slots nobody
// owns.
func TestCounterSlotsAcrossRecompilesAndRestarts(t *testing.T) {
	e := newTestEnv(t)
	g := newGateway(e)
	dir := bpffsDir(t)
	start := func() *Datapath {
		var dp *Datapath
		e.in(func() {
			var err error
			if dp, err = Load(LoadOptions{PinPath: dir}); err != nil {
				t.Fatal(err)
			}
			if err = dp.SetIfaces([]Iface{{Ifindex: e.lan, L2: L2FIB}, {Ifindex: e.wan, L2: L2FIB}}); err != nil {
				t.Fatal(err)
			}
			if err = dp.SetCounters(true); err != nil {
				t.Fatal(err)
			}
		})
		return dp
	}
	saved := e.dp
	defer func() { e.dp = saved }()
	e.dp = start()
	e.apply(g.snap)
	fwd := udp("10.0.0.5", "48.0.1.9", 64)
	e.runTimes(fwd, e.lan, 3)
	e.runTimes(udp("10.0.0.5", "48.0.9.9", 64), e.lan, 2)
	slot := e.dp.slots.byIndex[g.tunnel.Index]
	wideSlot := e.dp.slots.byIndex[g.wide.Index]
	if slot == 0 || wideSlot == 0 || slot == wideSlot {
		t.Fatalf("slots: tunnel %d, wide %d; want two distinct non-zero slots", slot, wideSlot)
	}

	// Recompile without `wide` and with a new policy: tunnel's slot and
	// counts stay; the new one does not get wide's slot.
	extra := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.7.0/24", 100, "123.2.0.1", 1, e.wan)
	next := g.snap
	next.Policies = []xfrm.Policy{extra}
	for _, p := range g.snap.Policies {
		if p.Index != g.wide.Index {
			next.Policies = append(next.Policies, p)
		}
	}
	e.apply(next)
	if s := e.dp.slots.byIndex[g.tunnel.Index]; s != slot {
		t.Fatalf("tunnel's slot moved from %d to %d on a recompile", slot, s)
	}
	if s := e.dp.slots.byIndex[extra.Index]; s == 0 || s == wideSlot {
		t.Fatalf("the new policy got slot %d; wide's (%d) rests first", s, wideSlot)
	}
	e.runTimes(fwd, e.lan, 2)
	e.runTimes(udp("10.0.0.5", "48.0.7.9", 64), e.lan, 1)
	got := e.countsByIndex()
	if got[g.tunnel.Index].Packets != 5 || got[extra.Index].Packets != 1 {
		t.Fatalf("tunnel %+v, new %+v; want 5 and 1", got[g.tunnel.Index], got[extra.Index])
	}
	if c, ok := got[g.wide.Index]; ok {
		t.Fatalf("a policy that left the tables is still reported: %+v", c)
	}
	e.dp.Close()

	// A restarted daemon adopts the owners: the same slots, the counts
	// kept, and a newcomer gets a slot nobody owns.
	e.dp = start()
	defer e.dp.Close()
	late := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.8.0/24", 100, "123.2.0.1", 1, e.wan)
	next.Policies = append(next.Policies, late)
	e.apply(next)
	if s := e.dp.slots.byIndex[g.tunnel.Index]; s != slot {
		t.Fatalf("the restarted daemon moved the tunnel's slot from %d to %d", slot, s)
	}
	for index, s := range e.dp.slots.byIndex {
		if s == e.dp.slots.byIndex[late.Index] && index != late.Index {
			t.Fatalf("the new policy got slot %d, owned by policy %d", s, index)
		}
	}
	got = e.countsByIndex()
	if got[g.tunnel.Index].Packets != 5 || got[extra.Index].Packets != 1 {
		t.Fatalf("after the restart: tunnel %+v, extra %+v; want 5 and 1", got[g.tunnel.Index], got[extra.Index])
	}
}
