// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"net/netip"
	"sort"

	"sluice/internal/kernel/xfrm"
)

// viewIndex finds the policies whose selectors overlap a selector without
// scanning them all: two prefixes overlap only when one contains the
// other, so a policy overlaps S when its destination prefix contains S's
// (one map lookup per prefix length in use) or lies inside it (a range of
// the destinations sorted by address). strongSwan's tunnels have disjoint
// destinations, so each lookup touches a handful of policies whether
// there are 10 tunnels or 65,536.
type viewIndex struct {
	byDst  map[netip.Prefix][]int // masked destination -> views
	lens   [2][]int               // prefix lengths in use, per family
	sorted []int                  // views by destination address, then length
	views  []netip.Prefix
	in     *Input
}

func (in *Input) index() *viewIndex {
	if in.idx != nil {
		return in.idx
	}
	x := &viewIndex{byDst: map[netip.Prefix][]int{}, in: in}
	seen := [2]map[int]bool{{}, {}}
	for i := range in.Views {
		d := in.Views[i].Policy.Sel.Dst.Masked()
		x.byDst[d] = append(x.byDst[d], i)
		f := fam(d)
		if !seen[f][d.Bits()] {
			seen[f][d.Bits()] = true
			x.lens[f] = append(x.lens[f], d.Bits())
		}
		x.sorted = append(x.sorted, i)
		x.views = append(x.views, d)
	}
	sort.Slice(x.sorted, func(a, b int) bool {
		pa, pb := x.views[x.sorted[a]], x.views[x.sorted[b]]
		if c := pa.Addr().Compare(pb.Addr()); c != 0 {
			return c < 0
		}
		return pa.Bits() < pb.Bits()
	})
	in.idx = x
	return x
}

func fam(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 0
	}
	return 1
}

// overlapping returns the views whose selectors overlap s.
func (x *viewIndex) overlapping(s xfrm.Selector) []int {
	d := s.Dst.Masked()
	var cand []int
	// Destinations containing d (including d itself).
	for _, l := range x.lens[fam(d)] {
		if l <= d.Bits() {
			cand = append(cand, x.byDst[netip.PrefixFrom(d.Addr(), l).Masked()]...)
		}
	}
	// Destinations strictly inside d: addresses from d's first onwards
	// while still inside d.
	lo := sort.Search(len(x.sorted), func(i int) bool { return x.views[x.sorted[i]].Addr().Compare(d.Addr()) >= 0 })
	for i := lo; i < len(x.sorted); i++ {
		v := x.views[x.sorted[i]]
		if !d.Contains(v.Addr()) {
			break
		}
		if v.Bits() > d.Bits() {
			cand = append(cand, x.sorted[i])
		}
	}
	out := cand[:0]
	for _, i := range cand {
		if overlaps(x.in.Views[i].Policy.Sel, s) {
			out = append(out, i)
		}
	}
	return out
}
