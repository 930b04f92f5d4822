// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"math/rand"
	"net/netip"
	"slices"
	"testing"

	"sluice/internal/fastpath"
	"sluice/internal/kernel/xfrm"
)

// The index must return exactly the overlapping views a full scan finds.
func TestIndexMatchesFullScan(t *testing.T) {
	seed := int64(14)
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d", seed)
	pfx := func() netip.Prefix {
		if rng.Intn(5) == 0 {
			a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(rng.Intn(4))})
			return netip.PrefixFrom(a, 32+rng.Intn(3)*8).Masked()
		}
		a := netip.AddrFrom4([4]byte{10, byte(rng.Intn(4)), byte(rng.Intn(4)), byte(rng.Intn(4))})
		return netip.PrefixFrom(a, []int{0, 8, 16, 24, 32}[rng.Intn(5)]).Masked()
	}
	sel := func() xfrm.Selector {
		d := pfx()
		s := pfx()
		for s.Addr().Is4() != d.Addr().Is4() {
			s = pfx()
		}
		k := xfrm.Selector{Src: s, Dst: d, Proto: []uint8{0, 6, 17}[rng.Intn(3)]}
		if k.Proto != 0 && rng.Intn(2) == 0 {
			k.DPort, k.DPortMask = uint16(rng.Intn(3)), 0xffff
		}
		return k
	}
	for round := 0; round < 50; round++ {
		in := Input{}
		for i := 0; i < 60; i++ {
			in.Views = append(in.Views, fastpath.PolicyView{Policy: xfrm.Policy{Index: uint32(i), Sel: sel()}})
		}
		for q := 0; q < 40; q++ {
			s := sel()
			var want []int
			for i := range in.Views {
				if overlaps(in.Views[i].Policy.Sel, s) {
					want = append(want, i)
				}
			}
			got := in.index().overlapping(s)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("round %d selector %v: index %v, scan %v", round, s, got, want)
			}
		}
	}
}

// 65,536 tunnels derive in one pass (the index keeps it linear); the
// figure itself is in docs/benchmarks.md. The views are built here so
// that only Derive is timed.
func BenchmarkDerive65536(b *testing.B) {
	views := scaleViews(65536)
	b.ResetTimer()
	for b.Loop() {
		res := Derive(Input{Views: views, Ports: ports(false), Router: wideRouter{}, InboundChain: 1})
		if len(res.Rules) != 65536+2 {
			b.Fatalf("%d rules, skips %v", len(res.Rules), res.Skips[:min(3, len(res.Skips))])
		}
	}
}

type wideRouter struct{}

func (wideRouter) Route(dst netip.Prefix) (NextHop, string) {
	return NextHop{Ifindex: p0, Name: "p0", DstMAC: macGW, SrcMAC: macP0, MTU: 1500}, ""
}

// scaleViews is n strongSwan tunnels (OUT, fwd-out, IN, fwd-in) between
// disjoint /24s, packet-offloaded on p0.
func scaleViews(n int) []fastpath.PolicyView {
	var views []fastpath.PolicyView
	for i := 0; i < n; i++ {
		lan := netip.PrefixFrom(netip.AddrFrom4([4]byte{16, byte(i >> 8), byte(i), 0}), 24)
		far := netip.PrefixFrom(netip.AddrFrom4([4]byte{48, byte(i >> 8), byte(i), 0}), 24)
		pols, _ := tunnel(lan.String(), far.String(), 100, p0)
		for _, p := range pols {
			v := fastpath.PolicyView{Policy: p, Certain: true}
			if p.Dir != xfrm.DirFwd {
				v.OffloadIfindex = p0
			}
			views = append(views, v)
		}
	}
	return views
}

func (wideRouter) Source(netip.Prefix, int) ([]netip.Addr, string) { return nil, "" }
