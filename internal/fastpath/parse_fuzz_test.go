// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"encoding/binary"
	"math/rand"
	"net/netip"
	"sync"
	"testing"

	"github.com/cilium/ebpf"

	"sluice/internal/testutil"
)

var (
	probeOnce sync.Once
	probe     parseprobeObjects
	probeErr  error
)

// runParseProbe runs bpf/parse_probe.c (parse_packet alone) over frame.
func runParseProbe(t testing.TB, frame []byte) parseprobeParseResult {
	t.Helper()
	probeOnce.Do(func() { probeErr = loadParseprobeObjects(&probe, nil) })
	if probeErr != nil {
		t.Fatalf("loading the parse probe: %v", probeErr)
	}
	if _, err := probe.XdpParseProbe.Run(&ebpf.RunOptions{Data: frame}); err != nil {
		t.Fatalf("BPF_PROG_RUN of the parse probe on % x: %v", frame, err)
	}
	var r parseprobeParseResult
	if err := probe.ParseOut.Lookup(uint32(0), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// checkParse compares parse_packet with modelParse on one frame.
func checkParse(t testing.TB, frame []byte) {
	t.Helper()
	got := runParseProbe(t, frame)
	want, wr := modelParse(frame)
	if Reason(got.Reason) != wr {
		t.Fatalf("frame % x:\nparse_packet says %s, the model %s", frame, Reason(got.Reason), wr)
	}
	if wr != parseOK {
		return
	}
	p := got.P
	var src, dst netip.Addr
	if p.Family == 0 {
		src, dst = netip.AddrFrom4(le4(p.Src[0])), netip.AddrFrom4(le4(p.Dst[0]))
	} else {
		src, dst = netip.AddrFrom16(le16(p.Src)), netip.AddrFrom16(le16(p.Dst))
	}
	type fields struct {
		V6, Tagged, ICMPErr       bool
		VID, TotLen, SPort, DPort uint16
		Proto, TTL                uint8
		Src, Dst                  netip.Addr
		DMAC                      string
	}
	g := fields{p.Family == 1, p.Tagged == 1, p.IcmpErr == 1, p.Vid, p.TotLen, ntohs(p.Sport), ntohs(p.Dport), p.Proto, p.Ttl, src, dst, string(p.Dmac[:])}
	w := fields{want.v6, want.tagged, want.icmpErr, want.vid, want.totLen, want.sport, want.dport, want.proto, want.ttl, want.src, want.dst, string(want.dmac)}
	if g != w {
		t.Fatalf("frame % x:\nparse_packet %+v\nmodel        %+v", frame, g, w)
	}
}

func le4(w uint32) [4]byte {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], w)
	return b
}

func le16(ws [4]uint32) [16]byte {
	var b [16]byte
	for i, w := range ws {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

func ntohs(v uint16) uint16 { return htons(v) }

// parseSeeds are frames of every shape the generator knows.
func parseSeeds(r *rand.Rand, n int) [][]byte {
	var out [][]byte
	for i := 0; i < n; i++ {
		v6 := i%2 == 1
		p, _ := randomPacket(r, v6)
		if i%7 == 0 {
			p.VLAN = uint16(1 + r.Intn(4000))
		}
		f, _ := hostile(r, p, v6, defaultDstMAC)
		out = append(out, f)
	}
	return out
}

// FuzzParsePacket checks parse_packet (BPF, through BPF_PROG_RUN) against
// modelParse on arbitrary frames: every reason, and every field the
// classifier reads. `go test -fuzz FuzzParsePacket ./internal/fastpath`.
func FuzzParsePacket(f *testing.F) {
	testutil.RequireRoot(f, "runs a BPF program")
	for _, s := range parseSeeds(rand.New(rand.NewSource(1)), 64) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 14 || len(frame) > 1500 {
			return // BPF_PROG_RUN takes an Ethernet frame of one page
		}
		checkParse(t, frame)
	})
}

// TestParsePacketMatchesModel is the fuzz test's seed corpus plus random
// byte flips of it, in the normal test run (the seed is logged).
func TestParsePacketMatchesModel(t *testing.T) {
	testutil.RequireRoot(t, "loads BPF programs and creates network namespaces")
	r := rand.New(rand.NewSource(modelSeed(t)))
	for _, f := range parseSeeds(r, 400) {
		checkParse(t, f)
		g := append([]byte{}, f...)
		for k := 0; k < 3; k++ {
			g[r.Intn(len(g))] ^= byte(1 << r.Intn(8))
		}
		checkParse(t, g)
	}
}
