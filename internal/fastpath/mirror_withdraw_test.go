// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"net/netip"
	"slices"
	"testing"

	"sluice/internal/kernel/xfrm"
)

// The copy's SA index answers StatesFor like a scan of every SA would,
// whatever the events did to it.
func TestMirrorCopyIndexesStatesByTemplate(t *testing.T) {
	peer, other := netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3")
	sa := func(dst netip.Addr, spi, reqid uint32) *xfrm.State {
		return &xfrm.State{Dst: dst, Proto: xfrm.ProtoESP, SPI: spi, Reqid: reqid, Mode: xfrm.ModeTunnel}
	}
	var c mirrorCopy
	c.load(Snapshot{States: []xfrm.State{*sa(peer, 1, 7), *sa(peer, 2, 8), *sa(other, 3, 7)}})
	check := func(step string) {
		t.Helper()
		for _, dst := range []netip.Addr{peer, other} {
			for _, reqid := range []uint32{0, 7, 8, 9} {
				var want, got []uint32
				for _, s := range c.states {
					if s.Dst == dst && (reqid == 0 || s.Reqid == reqid) {
						want = append(want, s.SPI)
					}
				}
				for _, s := range c.StatesFor(dst, reqid) {
					got = append(got, s.SPI)
				}
				slices.Sort(want)
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("%s: StatesFor(%s, %d) = %v, want %v", step, dst, reqid, got, want)
				}
			}
		}
	}
	check("load")
	c.apply(xfrm.Event{Kind: xfrm.StateNew, State: sa(peer, 4, 7)})
	check("new")
	c.apply(xfrm.Event{Kind: xfrm.StateUpd, State: sa(peer, 1, 9)}) // its reqid changed
	check("update")
	c.apply(xfrm.Event{Kind: xfrm.StateDel, State: sa(peer, 2, 0)})
	check("delete")
	c.apply(xfrm.Event{Kind: xfrm.StateExpire, Hard: true, State: sa(other, 3, 7)})
	check("hard expire")
	c.apply(xfrm.Event{Kind: xfrm.StateFlush, State: &xfrm.State{}})
	check("flush")
	if len(c.byBucket) != 0 {
		t.Fatalf("buckets left after a flush: %v", c.byBucket)
	}
}

// eventTier records what the mirror hands an EventTier.
type eventTier struct {
	recordingTier
	changes []XFRMChange
	states  [][]xfrm.State
}

func (e *eventTier) Withdraw(c XFRMChange, cur CurrentState) {
	e.changes = append(e.changes, c)
	e.states = append(e.states, cur.StatesFor(netip.MustParseAddr("192.0.2.2"), 0))
}

// Each event reaches the tier once applied, with the policy as it was
// before it (so an unchanged update can be told from a change).
func TestMirrorHandsEventsToTheTier(t *testing.T) {
	p := xfrm.Policy{Index: 8, Dir: xfrm.DirOut, Priority: 100}
	upd := p
	upd.Priority = 5
	sa := xfrm.State{Dst: netip.MustParseAddr("192.0.2.2"), Proto: xfrm.ProtoESP, SPI: 7, Mode: xfrm.ModeTunnel}
	tier := &eventTier{}
	m := &Mirror{Tier: tier}
	m.copy.load(Snapshot{Policies: []xfrm.Policy{p}, States: []xfrm.State{sa}})
	m.applyEvent(xfrm.Event{Kind: xfrm.PolicyUpd, Policy: &upd})
	m.applyEvent(xfrm.Event{Kind: xfrm.StateDel, State: &sa})
	if len(tier.changes) != 2 || tier.changes[0].Prev == nil || tier.changes[0].Prev.Priority != 100 {
		t.Fatalf("changes %+v", tier.changes)
	}
	if len(tier.states[1]) != 0 {
		t.Fatalf("the tier saw the copy before the deletion: %v", tier.states[1])
	}
}
