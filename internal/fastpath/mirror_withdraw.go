// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"fmt"
	"net/netip"

	"sluice/internal/kernel/xfrm"
)

// EventTier is a HardwareTier that also withdraws rules straight from the
// XFRM events, before the debounce and the next publish: a hardware rule
// outlives what it depends on for as long as the tier takes to notice, and
// the full derive at scale takes seconds.
type EventTier interface {
	HardwareTier
	// Withdraw is called on the mirror's goroutine for every change, once
	// the mirror's copy has applied it; cur reads that copy and is valid
	// only during the call. It must return quickly (it holds up the
	// mirror) and must not call back into the mirror.
	Withdraw(c XFRMChange, cur CurrentState)
}

// XFRMChange is one XFRM event with what the mirror knew before it.
type XFRMChange struct {
	xfrm.Event
	// Prev is the policy with the event's index before the event (nil: it
	// was not mirrored), for policy events.
	Prev *xfrm.Policy
	// PrevFwdBlock is the FWD default before the event.
	PrevFwdBlock bool
}

// CurrentState answers from the mirror's copy, after the event.
type CurrentState interface {
	// StatesFor returns the SAs to dst with the given reqid (0: every SA
	// to dst): the SAs a template with that destination and reqid can
	// resolve to are among them.
	StatesFor(dst netip.Addr, reqid uint32) []xfrm.State
}

// OffloadDevice returns the device that packet-offloads every SA the
// policy's template can resolve to among states (0: none, or not
// certain): the XDP program's reading, which the flower tier's rules
// depend on.
//
// A policy whose device would send some of its packets in cleartext
// whatever the driver (a template of reqid 0, see deviceMiss) gets 0: the
// flower tier's rules bypass the kernel as XDP does.
func OffloadDevice(p *xfrm.Policy, states []xfrm.State) int {
	if p.Action != xfrm.ActionAllow || deviceMiss(p, DeviceQuirks{}) {
		return 0
	}
	return packetOffloadDevice(p, states)
}

// applyEvent applies one event to the copy and hands it to an EventTier.
func (m *Mirror) applyEvent(ev xfrm.Event) {
	c := XFRMChange{Event: ev, PrevFwdBlock: m.copy.fwdBlock}
	if ev.Policy != nil {
		if p, ok := m.copy.policies[ev.Policy.Index]; ok {
			c.Prev = &p
		}
	}
	m.copy.apply(ev)
	m.withdrawSA(ev)
	if et, ok := m.Tier.(EventTier); ok {
		et.Withdraw(c, &m.copy)
	}
}

// withdrawSA takes an SA the kernel deleted out of the program's SA check
// at once, before the debounce and the next generation (sa_refs; the
// SA-deletion window in docs/fastpath.md). The kernel announces the
// delete after it made it: what remains open is the event's way here.
func (m *Mirror) withdrawSA(ev xfrm.Event) {
	if m.DP == nil {
		return
	}
	var err error
	switch {
	case ev.Kind == xfrm.StateFlush:
		err = m.DP.WithdrawAllSAs()
	case ev.State != nil && (ev.Kind == xfrm.StateDel || ev.Kind == xfrm.StateExpire && ev.Hard):
		err = m.DP.WithdrawSA(ev.State)
	}
	if err != nil && m.Log != nil {
		// the next generation, a debounce later, withdraws it anyway
		m.Log.Error("withdrawing a deleted SA from the fast path", "event", fmt.Sprint(ev.Kind), "err", err)
	}
}

// saBucket groups SAs the way templates find them: by destination, and by
// destination and reqid.
type saBucket struct {
	dst   netip.Addr
	reqid uint32
}

// StatesFor implements CurrentState.
func (c *mirrorCopy) StatesFor(dst netip.Addr, reqid uint32) []xfrm.State {
	keys := c.byBucket[saBucket{dst, reqid}]
	out := make([]xfrm.State, 0, len(keys))
	for k := range keys {
		out = append(out, c.states[k])
	}
	return out
}

// putState stores an SA and indexes it by destination and reqid.
func (c *mirrorCopy) putState(s xfrm.State) {
	k := keyOf(&s)
	c.dropState(k)
	c.states[k] = s
	if c.byBucket == nil {
		c.byBucket = map[saBucket]map[stateKey]struct{}{}
	}
	for _, b := range bucketsOf(&s) {
		if c.byBucket[b] == nil {
			c.byBucket[b] = map[stateKey]struct{}{}
		}
		c.byBucket[b][k] = struct{}{}
	}
}

// dropState removes an SA and its index entries.
func (c *mirrorCopy) dropState(k stateKey) {
	old, ok := c.states[k]
	if !ok {
		return
	}
	delete(c.states, k)
	for _, b := range bucketsOf(&old) {
		delete(c.byBucket[b], k)
		if len(c.byBucket[b]) == 0 {
			delete(c.byBucket, b)
		}
	}
}

func bucketsOf(s *xfrm.State) []saBucket {
	if s.Reqid == 0 {
		return []saBucket{{s.Dst, 0}}
	}
	return []saBucket{{s.Dst, 0}, {s.Dst, s.Reqid}}
}
