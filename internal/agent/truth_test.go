// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"strings"
	"testing"

	"sluice/internal/config"
	"sluice/internal/overlay"
)

// The truth of each SA is its own: two SAs on one port, one counting and
// one idle, are told apart by their own counters (the port's counters
// are not read); each says who counts it; an SA with less than asked
// carries apply's reason; a rekeyed SA starts a new count.
func TestTruthPerSA(t *testing.T) {
	tr := newTruthTracker()
	rep := func(bPackets, cPackets uint64, bSPI uint32) *overlay.VerifyReport {
		return &overlay.VerifyReport{SAs: []overlay.SAStatus{
			{Peer: "hv-b", Dir: "out", SPI: bSPI, Asked: config.OffloadModeAuto, Got: config.OffloadModePacket, Dev: "eth0", Packets: bPackets},
			{Peer: "hv-c", Dir: "out", SPI: 0xc1, Asked: config.OffloadModeCrypto, Got: config.OffloadModeCrypto, Dev: "eth0", Packets: cPackets},
			{Peer: "hv-d", Dir: "out", SPI: 0xd1, Asked: config.OffloadModeAuto, Got: config.OffloadModeNone, Packets: 3},
		}}
	}
	notes := []overlay.OffloadNote{{Peer: "hv-d", Dir: "out", Refused: []string{"packet refused (Device SA table is full)", "crypto refused (Device SA table is full)"}}}
	first := tr.look(rep(10, 5, 0xb1), notes)
	for _, s := range first {
		if s.Counting != nil {
			t.Errorf("first look at %s: counting %v", s.Peer, *s.Counting)
		}
	}
	// The next look comes from a reconcile that applied nothing, which
	// reports no reasons: the SA keeps apply's.
	ts := tr.look(rep(20, 5, 0xb1), nil)
	want := []struct {
		evidence string
		counting bool
		fallback bool
	}{{EvidenceDevice, true, false}, {EvidenceKernel, false, false}, {EvidenceSoftware, false, true}}
	for i, w := range want {
		s := ts[i]
		if s.Evidence != w.evidence || s.Counting == nil || *s.Counting != w.counting || s.Fallback != w.fallback {
			t.Errorf("%s: %+v, want evidence %s counting %v fallback %v", s.Peer, s, w.evidence, w.counting, w.fallback)
		}
	}
	if why := strings.Join(ts[2].WhyNot, "; "); !strings.Contains(why, "asked auto, the kernel holds none") || !strings.Contains(why, "SA table is full") {
		t.Errorf("hv-d why not: %q", why)
	}
	sum := summary(ts)
	if sum.Packet != 1 || sum.Crypto != 1 || sum.None != 1 || sum.Counting != 1 || sum.Idle != 2 || len(sum.NotAsAsked) != 1 ||
		sum.NotAsAsked[0].Peer != "hv-d" || sum.NotAsAsked[0].SPI != "0x000000d1" || sum.NotAsAsked[0].Mode != "none" {
		t.Errorf("summary %+v", sum)
	}
	// Rekeyed: hv-b's new SA is a first look again.
	if ts := tr.look(rep(1, 5, 0xb2), nil); ts[0].Counting != nil {
		t.Errorf("a new SA after a rekey: counting %v", *ts[0].Counting)
	}
}
