// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"net/netip"
	"testing"

	"sluice/internal/kernel/xfrm"
)

// BenchmarkCompile65536 is the publish's compile at 65,536 strongSwan
// tunnels (OUT, fwd-out, IN, fwd-in, two packet-offloaded SAs each): an
// XFRM event that arrives while the mirror publishes waits for it before
// the flower tier can withdraw a rule (docs/flower.md). The figure is in
// docs/benchmarks.md.
func BenchmarkCompile65536(b *testing.B) {
	snap := scaleSnapshot(65536)
	b.ResetTimer()
	for b.Loop() {
		t, err := Compile(snap)
		if err != nil {
			b.Fatal(err)
		}
		if t.Mirrored != len(snap.Policies) {
			b.Fatalf("%d of %d policies mirrored", t.Mirrored, len(snap.Policies))
		}
	}
}

func scaleSnapshot(n int) Snapshot {
	local, peer := netip.MustParseAddr("123.0.0.1"), netip.MustParseAddr("123.2.0.1")
	off := &xfrm.Offload{Ifindex: 2, Flags: xfrm.OffloadPacket}
	offIn := &xfrm.Offload{Ifindex: 2, Flags: xfrm.OffloadPacket | xfrm.OffloadInbound}
	var s Snapshot
	for i := range n {
		lan := netip.PrefixFrom(netip.AddrFrom4([4]byte{16, byte(i >> 8), byte(i), 0}), 24)
		far := netip.PrefixFrom(netip.AddrFrom4([4]byte{48, byte(i >> 8), byte(i), 0}), 24)
		idx, reqid := uint32(8*i+8), uint32(i+1)
		out := xfrm.Policy{Index: idx + 1, Dir: xfrm.DirOut, Priority: 100, Sel: xfrm.Selector{Src: lan, Dst: far},
			Tmpls: []xfrm.Tmpl{{Src: local, Dst: peer, Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, Reqid: reqid}}, Offload: off}
		fwdOut := out
		fwdOut.Index, fwdOut.Dir, fwdOut.Offload = idx+2, xfrm.DirFwd, nil
		fwdOut.Tmpls = []xfrm.Tmpl{{Src: local, Dst: peer, Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, Reqid: reqid, Optional: true}}
		in := xfrm.Policy{Index: idx + 3, Dir: xfrm.DirIn, Priority: 100, Sel: xfrm.Selector{Src: far, Dst: lan},
			Tmpls: []xfrm.Tmpl{{Src: peer, Dst: local, Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, Reqid: reqid}}, Offload: offIn}
		fwdIn := in
		fwdIn.Index, fwdIn.Dir, fwdIn.Offload = idx+4, xfrm.DirFwd, nil
		s.Policies = append(s.Policies, out, fwdOut, in, fwdIn)
		s.States = append(s.States,
			xfrm.State{Src: local, Dst: peer, Proto: xfrm.ProtoESP, SPI: 2*reqid + 0x1000, Reqid: reqid, Mode: xfrm.ModeTunnel, Offload: off},
			xfrm.State{Src: peer, Dst: local, Proto: xfrm.ProtoESP, SPI: 2*reqid + 0x1001, Reqid: reqid, Mode: xfrm.ModeTunnel, Offload: offIn})
	}
	return s
}
