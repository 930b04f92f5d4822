// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"
	"sort"
	"strings"

	"sluice/internal/config"
	"sluice/internal/fleet/v1alpha1"
	"sluice/internal/overlay"
)

// SATruth is the offload truth of one SA, from the SA's own kernel
// state: the offload the kernel holds for it (the xfrm state's offload
// attribute: crypto or packet, and the device) and whether its own
// lifetime counters moved since the last look. Device-wide counters
// (ethtool -S) are not used: one offloaded SA would make every SA of the
// port look offloaded.
type SATruth struct {
	Peer, Dir  string
	SPI        uint32
	Asked, Got string
	Dev        string
	Packets    uint64
	// Counting is nil on the first look at an SA, else whether its
	// packet counter moved since the previous look.
	Counting *bool
	// Evidence says who counts the SA's packets, so what Counting
	// proves (EvidenceDevice, EvidenceKernel, EvidenceSoftware).
	Evidence string
	// Fallback: the SA holds less than asked (auto got crypto or none,
	// packet or crypto got less).
	Fallback bool
	WhyNot   []string
}

// What an SA's own counters prove (SATruth.Evidence).
const (
	// EvidenceDevice: packet offload. The kernel reads the SA's counters
	// from the driver (xdo_dev_state_update_stats) and never does the
	// SA's crypto itself: counters that move are the NIC's work.
	EvidenceDevice = "device"
	// EvidenceKernel: crypto offload. The kernel counts the SA's packets
	// and the driver has no per-SA counter; a packet the device cannot
	// take (xdo_dev_offload_ok) is encrypted in software and counted the
	// same, so moving counters do not tell hardware from software.
	EvidenceKernel = "kernel"
	// EvidenceSoftware: no offload; the kernel does the crypto.
	EvidenceSoftware = "software"
)

// truthTracker remembers each SA's packet count between two looks, and
// the reasons apply gave for each peer's offload: only a reconcile that
// applies something reports them, and the SA keeps what it got.
type truthTracker struct {
	prevSA map[string]uint64   // peer/dir/spi -> packets
	why    map[string][]string // peer/dir -> apply's refusal reasons
}

func newTruthTracker() *truthTracker {
	return &truthTracker{prevSA: map[string]uint64{}, why: map[string][]string{}}
}

// look turns a verification into offload truth. notes are apply's offload
// reports: their Refused reasons go to the SA of the same peer and
// direction. Runs in the host's namespace (it reads nothing more from the
// kernel: verify read the SAs).
func (t *truthTracker) look(rep *overlay.VerifyReport, notes []overlay.OffloadNote) []SATruth {
	if rep == nil {
		return nil
	}
	var out []SATruth
	seen := map[string]uint64{}
	if len(notes) > 0 {
		// A new apply: its reasons replace the ones kept.
		t.why = map[string][]string{}
		for _, n := range notes {
			for _, d := range []string{"in", "out"} {
				if n.Dir == d || n.Dir == "" {
					t.why[n.Peer+"/"+d] = append(t.why[n.Peer+"/"+d], n.Refused...)
				}
			}
		}
	}
	for _, s := range rep.SAs {
		k := fmt.Sprintf("%s/%s/%x", s.Peer, s.Dir, s.SPI)
		tr := SATruth{Peer: s.Peer, Dir: s.Dir, SPI: s.SPI, Asked: s.Asked, Got: s.Got, Dev: s.Dev, Packets: s.Packets}
		if prev, ok := t.prevSA[k]; ok {
			moved := s.Packets > prev
			tr.Counting = &moved
		}
		seen[k] = s.Packets
		switch s.Got {
		case config.OffloadModePacket:
			tr.Evidence = EvidenceDevice
		case config.OffloadModeCrypto:
			tr.Evidence = EvidenceKernel
		default:
			tr.Evidence = EvidenceSoftware
		}
		want := s.Asked
		if want == config.OffloadModeAuto {
			want = config.OffloadModePacket
		}
		if s.Got != want {
			tr.Fallback = true
			tr.WhyNot = append(tr.WhyNot, fmt.Sprintf("asked %s, the kernel holds %s%s", s.Asked, orNone(s.Got), onDev(s.Dev)))
		}
		tr.WhyNot = append(tr.WhyNot, t.why[s.Peer+"/"+s.Dir]...)
		out = append(out, tr)
	}
	// SAs gone (rekeyed, deleted) are forgotten.
	t.prevSA = seen
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Peer != out[j].Peer {
			return out[i].Peer < out[j].Peer
		}
		return out[i].Dir < out[j].Dir
	})
	return out
}

func orNone(mode string) string {
	if mode == "" {
		return config.OffloadModeNone
	}
	return mode
}

func onDev(dev string) string {
	if dev == "" {
		return ""
	}
	return " on " + dev
}

// summary is the Host status's compact offload truth: SAs counted by the
// offload the kernel holds and by whether their counters move, and the
// SAs that do not hold what was asked, with the reason (at most 32).
func summary(ts []SATruth) *v1alpha1.OffloadSummary {
	if len(ts) == 0 {
		return nil
	}
	s := &v1alpha1.OffloadSummary{}
	for _, t := range ts {
		switch t.Got {
		case config.OffloadModePacket:
			s.Packet++
		case config.OffloadModeCrypto:
			s.Crypto++
		default:
			s.None++
		}
		if t.Counting != nil && *t.Counting {
			s.Counting++
		} else {
			s.Idle++
		}
		if t.Fallback && len(s.NotAsAsked) < 32 {
			s.NotAsAsked = append(s.NotAsAsked, v1alpha1.SAOffload{Peer: t.Peer, Dir: t.Dir, SPI: fmt.Sprintf("0x%08x", t.SPI),
				Asked: t.Asked, Mode: orNone(t.Got), Device: t.Dev, Reason: clip(strings.Join(t.WhyNot, "; "), 512)})
		}
	}
	return s
}

// apiSA is the status form of one SA.
func apiSA(t SATruth) v1alpha1.SA {
	w := t.WhyNot
	if len(w) > 16 {
		w = w[:16]
	}
	for i := range w {
		if len(w[i]) > 512 {
			w[i] = w[i][:509] + "..."
		}
	}
	return v1alpha1.SA{Dir: t.Dir, SPI: fmt.Sprintf("0x%08x", t.SPI), Asked: t.Asked, Mode: t.Got, Device: t.Dev,
		Counting: t.Counting, Evidence: t.Evidence, Fallback: t.Fallback, WhyNot: w}
}
