// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"fmt"
	"net/netip"
	"reflect"
	"time"

	"sluice/internal/kernel/xfrm"
)

type stateKey struct {
	dst   netip.Addr
	spi   uint32
	proto xfrm.Proto
}

func keyOf(s *xfrm.State) stateKey { return stateKey{dst: s.Dst, spi: s.SPI, proto: s.Proto} }

// mirrorCopy is the mirror's in-memory copy of the kernel's XFRM state.
type mirrorCopy struct {
	policies map[uint32]xfrm.Policy
	states   map[stateKey]xfrm.State
	fwdBlock bool
	// byBucket indexes states by destination and reqid (StatesFor).
	byBucket map[saBucket]map[stateKey]struct{}
}

func (c *mirrorCopy) load(snap Snapshot) {
	c.policies = make(map[uint32]xfrm.Policy, len(snap.Policies))
	for _, p := range snap.Policies {
		c.policies[p.Index] = p
	}
	c.states = make(map[stateKey]xfrm.State, len(snap.States))
	c.byBucket = map[saBucket]map[stateKey]struct{}{}
	for _, s := range snap.States {
		c.putState(s)
	}
	c.fwdBlock = snap.FwdDefaultBlock
}

func (c *mirrorCopy) snapshot() Snapshot {
	snap := Snapshot{FwdDefaultBlock: c.fwdBlock}
	snap.Policies = make([]xfrm.Policy, 0, len(c.policies))
	for _, p := range c.policies {
		snap.Policies = append(snap.Policies, p)
	}
	snap.States = make([]xfrm.State, 0, len(c.states))
	for _, s := range c.states {
		snap.States = append(snap.States, s)
	}
	return snap
}

func (c *mirrorCopy) apply(ev xfrm.Event) {
	switch ev.Kind {
	case xfrm.PolicyNew, xfrm.PolicyUpd:
		c.policies[ev.Policy.Index] = *ev.Policy
	case xfrm.PolicyDel:
		delete(c.policies, ev.Policy.Index)
	case xfrm.PolicyExpire:
		if ev.Hard {
			delete(c.policies, ev.Policy.Index)
		}
	case xfrm.PolicyFlush:
		sub := ev.Policy != nil && ev.Policy.Sub
		for i, p := range c.policies {
			if p.Sub == sub {
				delete(c.policies, i)
			}
		}
	case xfrm.PolicyDefault:
		c.fwdBlock = ev.Default.Fwd == xfrm.ActionBlock
	case xfrm.StateNew, xfrm.StateUpd:
		c.putState(*ev.State)
	case xfrm.StateDel:
		c.dropState(keyOf(ev.State))
	case xfrm.StateExpire:
		if ev.Hard {
			c.dropState(keyOf(ev.State))
		}
	case xfrm.StateFlush:
		for k := range c.states {
			if ev.State == nil || ev.State.Proto == 0 || k.proto == ev.State.Proto {
				c.dropState(k)
			}
		}
	}
}

// verification is a dump to compare the copy with, and the keys that
// changed after it was taken (their value in the dump may be older or newer
// than the copy's, so they prove nothing either way).
type verification struct {
	dump         mirrorCopy
	policies     map[uint32]bool
	states       map[stateKey]bool
	inconclusive bool // a flush or a default change: dump again
}

func newVerification(snap Snapshot) *verification {
	v := &verification{policies: map[uint32]bool{}, states: map[stateKey]bool{}}
	v.dump.load(snap)
	return v
}

func (v *verification) touch(ev xfrm.Event) {
	switch {
	case ev.Kind == xfrm.PolicyFlush || ev.Kind == xfrm.StateFlush || ev.Kind == xfrm.PolicyDefault:
		v.inconclusive = true
	case ev.Policy != nil:
		v.policies[ev.Policy.Index] = true
	case ev.State != nil:
		v.states[keyOf(ev.State)] = true
	}
}

// compare returns "" when the copy agrees with the dump on every key that
// did not change meanwhile, or else what differs.
func (v *verification) compare(c *mirrorCopy) string {
	var missing, extra, changed int
	var first string
	note := func(n *int, what string) {
		if *n++; first == "" {
			first = what
		}
	}
	for i, p := range v.dump.policies {
		if v.policies[i] {
			continue
		}
		if q, ok := c.policies[i]; !ok {
			note(&missing, fmt.Sprintf("policy %d missing", i))
		} else if !reflect.DeepEqual(p, q) {
			note(&changed, fmt.Sprintf("policy %d differs", i))
		}
	}
	for i := range c.policies {
		if _, ok := v.dump.policies[i]; !ok && !v.policies[i] {
			note(&extra, fmt.Sprintf("policy %d is gone from the kernel", i))
		}
	}
	for k, s := range v.dump.states {
		if v.states[k] {
			continue
		}
		if q, ok := c.states[k]; !ok {
			note(&missing, fmt.Sprintf("SA spi %#x missing", k.spi))
		} else if !reflect.DeepEqual(s, q) {
			note(&changed, fmt.Sprintf("SA spi %#x differs", k.spi))
		}
	}
	for k := range c.states {
		if _, ok := v.dump.states[k]; !ok && !v.states[k] {
			note(&extra, fmt.Sprintf("SA spi %#x is gone from the kernel", k.spi))
		}
	}
	if v.dump.fwdBlock != c.fwdBlock {
		note(&changed, "the FWD default differs")
	}
	if first == "" {
		return ""
	}
	return fmt.Sprintf("%d missing, %d extra, %d changed; first: %s", missing, extra, changed, first)
}

// publish compiles the copy and swaps it in, opening the fast path.
func (m *Mirror) publish() error {
	start := time.Now()
	snap := m.copy.snapshot()
	FillRouteMTU(&snap, m.pathMTU())
	snap.Quirks = m.Quirks
	m.routeMTU, m.routeState = snap.RouteMTU, make(map[Endpoints]*xfrm.State, len(snap.RouteMTU))
	for i := range snap.States {
		st := &snap.States[i]
		if e := (Endpoints{Src: st.Src, Dst: st.Dst}); m.routeState[e] == nil {
			m.routeState[e] = st
		}
	}
	tables, err := Compile(snap)
	if err == nil {
		err = m.DP.Apply(tables)
	}
	if err != nil {
		return err
	}
	m.announceDeviceMisses(tables.DeviceMisses)
	if m.Tier != nil {
		m.Tier.Update(snap)
	}
	byIndex := make(map[uint32]xfrm.Policy, len(m.copy.policies))
	for i, p := range m.copy.policies {
		byIndex[i] = p
	}
	m.setStatus(func(s *MirrorStatus) {
		m.byIndex = byIndex
		s.InSync, s.State = true, StateInSync
		s.KernelPolicies = len(snap.Policies)
		s.KernelStates = len(snap.States)
		s.MirroredPolicies = tables.Mirrored
		s.Tuples = [2]int{len(tables.Tuples[0]), len(tables.Tuples[1])}
		s.Syncs++
		s.LastSync = time.Now()
		s.LastSyncDuration = time.Since(start).String()
		s.LastError = ""
	})
	return nil
}
