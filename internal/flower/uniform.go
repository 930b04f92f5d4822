// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"sluice/internal/fastpath"
	"sluice/internal/kernel/xfrm"
)

// uniform returns "" when the XDP program's decision is the same forward
// for every packet v's selector matches, judged from the policies alone
// (the FIB is the Router's part), or the reason it is not. It is
// deliberately conservative: any overlap that could change the outcome for
// some packet of the selector leaves the whole selector to XDP, which
// decides per packet.
func (in *Input) uniform(v *fastpath.PolicyView) string {
	p := &v.Policy
	if !v.Certain {
		return "uncertain: the policy depends on state XDP cannot see (mark, if_id, ifindex, sub policy, security context)"
	}
	s := p.Sel
	var fwdCover bool
	var fwdPrios = map[uint32]int{}
	for _, i := range in.index().overlapping(s) {
		o := &in.Views[i]
		q := &o.Policy
		if q.Index == p.Index && q.Dir == p.Dir {
			continue
		}
		if !o.Certain {
			return "uncertain: an overlapping policy depends on state XDP cannot see"
		}
		switch {
		case q.Dir == p.Dir:
			// The program picks the lowest priority value; a tie is
			// uncertain. An overlapping policy that wins anywhere, or
			// ties, makes the selector non-uniform.
			if q.Priority <= p.Priority {
				return "overlap: " + q.Dir.String() + " policy " + itoa(q.Index) + " with a better or equal priority overlaps the selector"
			}
		case q.Dir == xfrm.DirFwd:
			// Outbound: the forwarded cleartext must pass the FWD check,
			// and a FWD match the kernel accepts only decrypted sends it
			// down the program's inbound branch. Inbound: the program
			// decides by the FWD match when there is one. Either way,
			// only allow policies whose templates are all optional keep
			// the outcome a forward.
			if q.Action != xfrm.ActionAllow {
				return "fwd-check: FWD block policy " + itoa(q.Index) + " overlaps the selector"
			}
			if p.Dir == xfrm.DirOut && o.TmplRequired {
				return "fwd-check: FWD policy " + itoa(q.Index) + " requires an SA for part of the selector"
			}
			if n := fwdPrios[q.Priority]; n > 0 {
				return "uncertain: two FWD policies of equal priority overlap the selector"
			}
			fwdPrios[q.Priority]++
			if covers(q.Sel, s) {
				fwdCover = true
			}
		case q.Dir == xfrm.DirIn && p.Dir == xfrm.DirOut:
			// The program takes its inbound branch (kernel) for packets
			// matching an IN policy.
			return "overlap: IN policy " + itoa(q.Index) + " overlaps the selector (the program passes those packets to the kernel)"
		}
	}
	if p.Dir == xfrm.DirOut && in.FwdDefaultBlock && !fwdCover {
		return "fwd-check: the FWD default is block and no FWD policy covers the whole selector"
	}
	return ""
}

// overlaps reports whether some packet matches both selectors.
func overlaps(a, b xfrm.Selector) bool {
	if a.Src.Addr().Is4() != b.Src.Addr().Is4() || !a.Src.Overlaps(b.Src) || !a.Dst.Overlaps(b.Dst) {
		return false
	}
	if a.Proto != 0 && b.Proto != 0 && a.Proto != b.Proto {
		return false
	}
	return (a.SPort^b.SPort)&a.SPortMask&b.SPortMask == 0 && (a.DPort^b.DPort)&a.DPortMask&b.DPortMask == 0
}

// covers reports whether a matches every packet b matches.
func covers(a, b xfrm.Selector) bool {
	if a.Src.Addr().Is4() != b.Src.Addr().Is4() ||
		a.Src.Bits() > b.Src.Bits() || !a.Src.Contains(b.Src.Addr()) ||
		a.Dst.Bits() > b.Dst.Bits() || !a.Dst.Contains(b.Dst.Addr()) {
		return false
	}
	if a.Proto != 0 && a.Proto != b.Proto {
		return false
	}
	return a.SPortMask&^b.SPortMask == 0 && (a.SPort^b.SPort)&a.SPortMask == 0 &&
		a.DPortMask&^b.DPortMask == 0 && (a.DPort^b.DPort)&a.DPortMask == 0
}
