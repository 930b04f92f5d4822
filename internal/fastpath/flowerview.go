// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"sluice/internal/kernel/xfrm"
)

// PolicyView is one mirrored policy as the XDP program's compiled tables
// hold it: the facts the program decides on. The flower tier
// (internal/flower) derives its hardware rules from these views, so the
// two tiers share one reading of each policy and a fix to the compiler
// (what counts as uncertain, which device packet-offloads an SA) reaches
// both.
type PolicyView struct {
	Policy xfrm.Policy
	// Certain is false when the kernel's match depends on state the
	// program cannot see (marks, if_id, selector ifindex, sub policies,
	// security contexts): the program hands such packets to the kernel.
	Certain bool
	// TmplRequired: at least one template is not optional, so the kernel
	// accepts matching forwarded traffic only decrypted.
	TmplRequired bool
	// OffloadIfindex is the device that packet-offloads every SA the
	// policy's template can resolve to (0: none, or not certain).
	OffloadIfindex int
	// SAMTU is the largest packet the SA carries (OUT policies with an
	// OffloadIfindex; 0: not known, forward nothing): the XDP program's
	// post-SA limit, and the flower rule's police mtu.
	SAMTU int
}

// PolicyViews returns the view of every policy in s that can match
// forwarded traffic (directions in, out and fwd), computed by the same
// code that fills the program's tables.
func PolicyViews(s Snapshot) []PolicyView {
	bySA := bucketStates(s.States)
	out := make([]PolicyView, 0, len(s.Policies))
	for i := range s.Policies {
		p := &s.Policies[i]
		if p.Dir > xfrm.DirFwd {
			continue
		}
		v := policyValue(p, bySA.candidates(p), s.RouteMTU)
		out = append(out, PolicyView{
			Policy:         *p,
			Certain:        v.Flags&flagUncertain == 0,
			TmplRequired:   v.Flags&flagTmplRequired != 0,
			OffloadIfindex: int(v.OffloadIfindex),
			SAMTU:          int(v.SaMtu),
		})
	}
	return out
}

// saBuckets holds SAs by destination and by destination and reqid.
// policyValue looks for the SAs of a policy's template among the states it
// is given, and an SA can only match a template with its destination (and
// its reqid, when the template names one): handing it that bucket instead
// of every SA gives the same answer in linear time (65,536 tunnels: every
// SA per policy is 4.3e9 comparisons).
type saBuckets map[saBucket][]xfrm.State

func bucketStates(states []xfrm.State) saBuckets {
	b := saBuckets{}
	for _, st := range states {
		for _, k := range bucketsOf(&st) {
			b[k] = append(b[k], st)
		}
	}
	return b
}

// candidates returns the SAs p's first template can resolve to (with
// others: policyValue gives up on several templates anyway).
func (b saBuckets) candidates(p *xfrm.Policy) []xfrm.State {
	if len(p.Tmpls) == 0 {
		return nil
	}
	return b[saBucket{p.Tmpls[0].Dst, p.Tmpls[0].Reqid}]
}
