// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"fmt"
	"time"
)

// Placement decides which eligible tunnels the NIC serves: flower for
// tunnels with steady traffic, XDP for new or idle ones (a rule costs a
// slot of the NIC's finite flow table and an install; a new tunnel starts
// on XDP at once). Rates come from the XDP per-policy counters while a
// tunnel is on XDP and from its flower rule's statistics once it is in the
// NIC (XDP no longer sees those packets). Hysteresis: promotion needs
// PromoteAfter intervals in a row at or above PromotePPS, demotion
// DemoteAfter intervals in a row below DemotePPS (lower than PromotePPS),
// so a tunnel near a threshold does not flap.
type Placement struct {
	PromotePPS   float64
	DemotePPS    float64
	PromoteAfter int
	DemoteAfter  int
	Interval     time.Duration

	tunnels             map[uint32]*tunnelState
	Promotions, Demoted uint64
}

type tunnelState struct {
	onFlower    bool
	waiting     bool // steady enough, but its device's budget is full
	above       int  // consecutive intervals at or above PromotePPS
	below       int  // consecutive intervals below DemotePPS
	lastPackets uint64
	seen        bool
	pps         float64
}

// placementReason starts every reason OnFlower gives.
const placementReason = "placement: "

// DefaultPlacement is what `flower-promote-pps: N` sets up.
func DefaultPlacement(promotePPS float64) *Placement {
	return &Placement{PromotePPS: promotePPS, DemotePPS: promotePPS / 10, PromoteAfter: 3, DemoteAfter: 10, Interval: 2 * time.Second}
}

// Observe records a policy's packet count (XDP's while it is on XDP, its
// rule's while it is on flower; the caller passes the one that counts)
// after dt, and reports whether its tier changed.
func (p *Placement) Observe(index uint32, packets uint64, dt time.Duration, room bool) (changed bool) {
	if p.tunnels == nil {
		p.tunnels = map[uint32]*tunnelState{}
	}
	t := p.tunnels[index]
	if t == nil {
		t = &tunnelState{}
		p.tunnels[index] = t
	}
	if !t.seen || packets < t.lastPackets {
		// First sight, or the counter restarted (a new rule): no rate yet.
		t.seen, t.lastPackets = true, packets
		return false
	}
	t.pps = float64(packets-t.lastPackets) / dt.Seconds()
	t.lastPackets = packets
	if t.pps >= p.PromotePPS {
		t.above++
	} else {
		t.above = 0
	}
	if t.pps < p.DemotePPS {
		t.below++
	} else {
		t.below = 0
	}
	t.waiting = !t.onFlower && t.above >= p.PromoteAfter && !room
	switch {
	case !t.onFlower && t.above >= p.PromoteAfter && room:
		t.onFlower, t.above, t.seen = true, 0, false
		p.Promotions++
		return true
	case t.onFlower && t.below >= p.DemoteAfter:
		t.onFlower, t.below, t.seen = false, 0, false
		p.Demoted++
		return true
	}
	return false
}

// OnFlower reports whether the policy's tunnel is placed in the NIC, and
// why it is or is not (shown by `show gateway`).
func (p *Placement) OnFlower(index uint32) (bool, string) {
	t := p.tunnels[index]
	if t == nil {
		return false, "placement: new tunnel, on XDP until its traffic is steady"
	}
	if t.onFlower {
		return true, fmt.Sprintf("placement: steady traffic (%.0f pps; demoted below %.0f pps for %d intervals of %s)", t.pps, p.DemotePPS, p.DemoteAfter, p.Interval)
	}
	if t.waiting {
		return false, fmt.Sprintf("placement: steady traffic (%.0f pps), waiting for room in the device's rule budget", t.pps)
	}
	return false, fmt.Sprintf("placement: %.0f pps, promoted at %.0f pps for %d intervals of %s", t.pps, p.PromotePPS, p.PromoteAfter, p.Interval)
}

// Forget drops policies no longer eligible.
func (p *Placement) Forget(keep func(uint32) bool) {
	for i := range p.tunnels {
		if !keep(i) {
			delete(p.tunnels, i)
		}
	}
}
