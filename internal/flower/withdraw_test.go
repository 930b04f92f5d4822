// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"net/netip"
	"slices"
	"testing"

	"sluice/internal/fastpath"
	"sluice/internal/kernel/xfrm"
)

// liveStates is the mirror's copy as CurrentState reads it.
type liveStates []xfrm.State

func (l liveStates) StatesFor(dst netip.Addr, reqid uint32) []xfrm.State {
	var out []xfrm.State
	for _, s := range l {
		if s.Dst == dst && (reqid == 0 || s.Reqid == reqid) {
			out = append(out, s)
		}
	}
	return out
}

// withdrawLab derives the rules of two IPv4 tunnels and indexes them the
// way the tier does before installing.
func withdrawLab(t *testing.T) (*withdrawal, fastpath.Snapshot, []Rule) {
	t.Helper()
	idx = 1000 // the same policy indexes on every call
	pa, sa := tunnel("16.0.0.0/16", "48.0.0.0/16", 100, p0)
	pb, sb := tunnel("16.1.0.0/16", "48.1.0.0/16", 100, p0)
	snap := withMTU(fastpath.Snapshot{Policies: append(pa, pb...), States: append(sa, sb...)})
	views := fastpath.PolicyViews(snap)
	res := Derive(Input{Views: views, Ports: ports(false), Router: fakeRouter{}})
	w := &withdrawal{}
	gen := w.published()
	rules := w.prepare(&Installer{}, res.Rules, views, gen, &res.Skips)
	if len(w.deps) != 2 {
		t.Fatalf("deps %v from rules %v skips %v", w.deps, res.Rules, res.Skips)
	}
	return w, snap, rules
}

func hitsOf(w *withdrawal, c fastpath.XFRMChange, cur liveStates) []uint32 {
	d, ok := damageOf(c, w.gen)
	if !ok {
		return nil
	}
	h := w.hits(&d, cur)
	w.log = append(w.log, d)
	slices.Sort(h)
	return slices.Compact(h)
}

func TestWithdrawOnlyWhatLostItsGround(t *testing.T) {
	_, snap, _ := withdrawLab(t)
	outA, fwdA, outB := snap.Policies[0], snap.Policies[1], snap.Policies[4]
	saA, saB := snap.States[0], snap.States[2]
	rekeyed := saA
	rekeyed.SPI = 0x7777
	software := saA
	software.SPI, software.Offload = 0x8888, nil
	otherDev := saA
	otherDev.SPI, otherDev.Offload = 0x9999, &xfrm.Offload{Ifindex: other, Flags: xfrm.OffloadPacket}
	changed := outA
	changed.Priority = 5
	block := xfrm.PolicyDefaults{Fwd: xfrm.ActionBlock}
	for _, tc := range []struct {
		name string
		c    fastpath.XFRMChange
		cur  liveStates // the mirror's SAs after the event
		want []uint32
	}{
		{"rekey: new offloaded SA added", fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.StateNew, State: &rekeyed}},
			liveStates{saA, rekeyed, saB}, nil},
		{"rekey: old SA deleted, the new one serves", fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.StateDel, State: &saA}},
			liveStates{rekeyed, saB}, nil},
		{"last SA deleted", fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.StateDel, State: &saA}},
			liveStates{saB}, []uint32{outA.Index}},
		{"SA hard-expired", fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.StateExpire, Hard: true, State: &saA}},
			liveStates{saB}, []uint32{outA.Index}},
		{"SA soft-expired: nothing", fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.StateExpire, State: &saA}},
			liveStates{saA, saB}, nil},
		{"software SA beside the offloaded one", fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.StateNew, State: &software}},
			liveStates{saA, software, saB}, []uint32{outA.Index}},
		{"SA on another device", fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.StateUpd, State: &otherDev}},
			liveStates{saA, otherDev, saB}, []uint32{outA.Index}},
		{"OUT policy deleted", fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.PolicyDel, Policy: &outA}},
			liveStates{saA, saB}, []uint32{outA.Index}},
		{"fwd-out policy hard-expired", fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.PolicyExpire, Hard: true, Policy: &fwdA}},
			liveStates{saA, saB}, []uint32{outA.Index}},
		{"policy updated unchanged (strongSwan after a rekey)", fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.PolicyUpd, Policy: &outB}, Prev: &outB},
			liveStates{saA, saB}, nil},
		{"policy updated with a new priority", fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.PolicyUpd, Policy: &changed}, Prev: &outA},
			liveStates{saA, saB}, []uint32{outA.Index}},
		{"FWD default turned to block", fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.PolicyDefault, Default: &block}},
			liveStates{saA, saB}, []uint32{outA.Index, outB.Index}},
		{"SA flush", fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.StateFlush, State: &xfrm.State{}}},
			nil, []uint32{outA.Index, outB.Index}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _, _ := withdrawLab(t)
			if got := hitsOf(w, tc.c, tc.cur); !slices.Equal(got, tc.want) {
				t.Fatalf("withdrew %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("a new overlapping policy", func(t *testing.T) {
		w, _, _ := withdrawLab(t)
		in := xfrm.Policy{Index: 999, Dir: xfrm.DirIn, Priority: 1, Action: xfrm.ActionAllow,
			Sel: xfrm.Selector{Src: netip.MustParsePrefix("16.1.2.0/24"), Dst: netip.MustParsePrefix("48.1.0.0/24")}}
		if got := hitsOf(w, fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.PolicyNew, Policy: &in}}, nil); !slices.Equal(got, []uint32{outB.Index}) {
			t.Fatalf("withdrew %v, want B's OUT policy %d", got, outB.Index)
		}
	})
}

// Events that arrive while the worker derives from an older snapshot are
// replayed on its rules before anything is installed; events the snapshot
// already includes are not.
func TestWithdrawReplaysEventsNewerThanTheSnapshot(t *testing.T) {
	w, snap, rules := withdrawLab(t)
	gen := w.gen
	saA := snap.States[0]
	outA := snap.Policies[0]
	// The old SA goes while the worker is busy; the rekeyed SA serves.
	rekeyed := saA
	rekeyed.SPI = 0x7777
	hitsOf(w, fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.StateNew, State: &rekeyed}}, liveStates{saA, rekeyed})
	hitsOf(w, fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.StateDel, State: &saA}}, liveStates{rekeyed})
	var skips []Skip
	views := fastpath.PolicyViews(snap)
	if got := w.prepare(&Installer{}, slices.Clone(rules), views, gen, &skips); len(got) != len(rules) {
		t.Fatalf("a rekey the event found served withdrew rules on replay: %v", skips)
	}
	// Then the OUT policy goes: a re-derive of the same snapshot (a route
	// change) must not bring its rule back.
	hitsOf(w, fastpath.XFRMChange{Event: xfrm.Event{Kind: xfrm.PolicyDel, Policy: &outA}}, nil)
	skips = nil
	got := w.prepare(&Installer{}, slices.Clone(rules), views, gen, &skips)
	for _, r := range got {
		if r.Kind == KindForward && r.PolicyIndex == outA.Index {
			t.Fatalf("the deleted policy's rule came back from the older snapshot: %v", r)
		}
	}
	if len(skips) != 1 || skips[0].PolicyIndex != outA.Index {
		t.Fatalf("skips %v", skips)
	}
	// The next snapshot includes the deletion: the log is done with.
	next := w.published()
	w.prepare(&Installer{}, nil, nil, next, &skips)
	if len(w.log) != 0 {
		t.Fatalf("log kept %d events older than the snapshot", len(w.log))
	}
}
