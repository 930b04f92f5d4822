// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"math/rand"
	"net/netip"
	"testing"

	"sluice/internal/kernel/xfrm"
)

// PolicyViews buckets the SAs by destination and reqid; the answer must be
// the compiler's own (policyValue over every SA).
func TestPolicyViewsEqualTheCompilersValues(t *testing.T) {
	rng := rand.New(rand.NewSource(14))
	addr := func() netip.Addr { return netip.AddrFrom4([4]byte{192, 0, 2, byte(1 + rng.Intn(3))}) }
	for round := 0; round < 200; round++ {
		var s Snapshot
		for i := 0; i < 6; i++ {
			off := &xfrm.Offload{Ifindex: 1 + rng.Intn(2), Flags: xfrm.OffloadPacket}
			if rng.Intn(4) == 0 {
				off = nil
			}
			s.States = append(s.States, xfrm.State{Src: addr(), Dst: addr(), Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, SPI: uint32(i), Reqid: uint32(rng.Intn(3)), Offload: off})
		}
		for i := 0; i < 6; i++ {
			p := xfrm.Policy{Index: uint32(i), Dir: xfrm.DirOut,
				Sel:     xfrm.Selector{Src: netip.MustParsePrefix("10.0.0.0/8"), Dst: netip.MustParsePrefix("48.0.0.0/8")},
				Tmpls:   []xfrm.Tmpl{{Src: addr(), Dst: addr(), Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, Reqid: uint32(rng.Intn(3))}},
				Offload: &xfrm.Offload{Ifindex: 1 + rng.Intn(2), Flags: xfrm.OffloadPacket}}
			s.Policies = append(s.Policies, p)
		}
		for i, v := range PolicyViews(s) {
			want := policyValue(&s.Policies[i], s.States, s.RouteMTU)
			if int(want.OffloadIfindex) != v.OffloadIfindex {
				t.Fatalf("round %d policy %d: view says device %d, the compiler %d", round, i, v.OffloadIfindex, want.OffloadIfindex)
			}
		}
	}
}
