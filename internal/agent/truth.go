// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"
	"sort"

	"sluice/internal/config"
	"sluice/internal/fleet/v1alpha1"
	"sluice/internal/kernel"
	"sluice/internal/overlay"
)

// SATruth is the offload truth of one SA: what was asked, what the kernel
// holds, and whether the device's hardware counters move with the SA's.
type SATruth struct {
	Peer, Dir  string
	SPI        uint32
	Asked, Got string
	Dev        string
	Packets    uint64
	// InStep is nil when it cannot be told (no offload, no traffic since
	// the last look, or the device has no IPsec counters).
	InStep *bool
	// Fallback: the SA holds less than asked (auto got crypto or none),
	// or the hardware does not count its traffic.
	Fallback bool
	WhyNot   []string
}

// truthTracker compares SA and device counters between two looks.
type truthTracker struct {
	prevSA  map[string]uint64 // peer/dir/spi -> packets
	prevDev map[string]uint64 // device -> sum of its "ipsec" counters
}

func newTruthTracker() *truthTracker {
	return &truthTracker{prevSA: map[string]uint64{}, prevDev: map[string]uint64{}}
}

// ipsecCounters sums a device's IPsec counters (kernel.IsIPsecCounter
// says which); ok false when the device has none.
func ipsecCounters(dev string) (uint64, bool) {
	s, err := kernel.EthtoolIPsecStats(dev)
	if err != nil || len(s) == 0 {
		return 0, false
	}
	var sum uint64
	for _, v := range s {
		sum += v
	}
	return sum, true
}

// look turns a verification into offload truth. notes are apply's offload
// reports: their Refused reasons go to the SA of the same peer and
// direction. Runs in the host's namespace.
func (t *truthTracker) look(rep *overlay.VerifyReport, notes []overlay.OffloadNote) []SATruth {
	if rep == nil {
		return nil
	}
	devNow := map[string]uint64{}
	devHas := map[string]bool{}
	for _, s := range rep.SAs {
		if s.Dev != "" && !devHas[s.Dev] {
			devNow[s.Dev], devHas[s.Dev] = ipsecCounters(s.Dev)
		}
	}
	var out []SATruth
	for _, s := range rep.SAs {
		k := fmt.Sprintf("%s/%s/%x", s.Peer, s.Dir, s.SPI)
		tr := SATruth{Peer: s.Peer, Dir: s.Dir, SPI: s.SPI, Asked: s.Asked, Got: s.Got, Dev: s.Dev, Packets: s.Packets}
		prev, seen := t.prevSA[k]
		t.prevSA[k] = s.Packets
		if s.Got != config.OffloadModeNone && s.Got != "" && devHas[s.Dev] && seen && s.Packets > prev {
			pd, dseen := t.prevDev[s.Dev]
			if dseen {
				in := devNow[s.Dev] > pd
				tr.InStep = &in
			}
		}
		switch {
		case s.Asked == config.OffloadModeAuto && s.Got != config.OffloadModePacket:
			tr.Fallback = true
		case s.Asked != config.OffloadModeAuto && s.Asked != s.Got:
			tr.Fallback = true
		case tr.InStep != nil && !*tr.InStep:
			tr.Fallback = true
		}
		if tr.InStep != nil && !*tr.InStep {
			tr.WhyNot = append(tr.WhyNot, fmt.Sprintf("the SA counted %d packet(s) since the last look and %s's IPsec counters did not move: the kernel does the crypto", s.Packets-prev, s.Dev))
		}
		for _, n := range notes {
			if n.Peer == s.Peer && n.Dir == s.Dir {
				tr.WhyNot = append(tr.WhyNot, n.Refused...)
			}
		}
		out = append(out, tr)
	}
	for d, v := range devNow {
		t.prevDev[d] = v
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Peer != out[j].Peer {
			return out[i].Peer < out[j].Peer
		}
		return out[i].Dir < out[j].Dir
	})
	return out
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
		HardwareInStep: t.InStep, Fallback: t.Fallback, WhyNot: w}
}
