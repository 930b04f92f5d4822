// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"math"
	"strings"
)

// RateMaxAuto is the --rate-max that asks for a ramp instead of a fixed top.
const RateMaxAuto = "auto"

// ParseRateMax reads --rate-max: a rate (ParseRate), or "auto", which
// returns auto = true and a rate of 0 pps (no top).
func ParseRateMax(flag, s string) (r Rate, auto bool, err error) {
	if strings.EqualFold(strings.TrimSpace(s), RateMaxAuto) {
		return Rate{Unit: "pps"}, true, nil
	}
	r, err = ParseRate(flag, s)
	if err != nil {
		err = fmt.Errorf("%w, or auto to raise the rate until the forwarder loses or the generator falls short", err)
	}
	return r, false, err
}

// Ramp is --rate-max auto: a fixed top would decide the result on a
// machine where the forwarder carries more than the top (the demo's 3 Mpps
// cap hid the ratio of two XDP forwarders that both reached it). The load
// starts at StartPPS and rises by Factor per step until a step ends the
// climb (climbEnd: the forwarder lost, or the generator stopped gaining)
// or RunOptions.Steps steps have run. After a loss, Refine trials bisect,
// geometrically, between the rate before it and the rate that lost. Every
// forwarder of a compare climbs the same rates.
type Ramp struct {
	StartPPS float64 `json:"start_pps"`
	Factor   float64 `json:"factor"`
	Refine   int     `json:"refine"`
}

// plateauGain is how much more than any step before a step must send, when
// the generator falls short of its target, to count as gaining; after
// plateauSteps such steps in a row that do not gain, the climb ends. On a
// busy machine the generator falls short at any rate (its thread waits for
// the CPU, and the schedule slips rather than catch up in a burst), by a
// share that follows the target and jumps with the other work, so one step
// that does not gain is not yet a plateau; at its ceiling it stops gaining.
const (
	plateauGain  = 1.05
	plateauSteps = 2
)

// Validate names the flag to fix.
func (r *Ramp) Validate() error {
	if !(r.StartPPS > 0) {
		return fmt.Errorf("--rate-start %g: a positive rate such as 500kpps", r.StartPPS)
	}
	if !(r.Factor >= 1.05 && r.Factor <= 10) {
		return fmt.Errorf("--rate-factor %g: use 1.05 to 10 (each ramp step multiplies the rate by it)", r.Factor)
	}
	if r.Refine < 0 || r.Refine > 20 {
		return fmt.Errorf("--refine %d: use 0 to 20 trials", r.Refine)
	}
	return nil
}

// lossy: the step lost more than the threshold (or sent nothing).
func lossy(s Step, threshold float64) bool { return s.TxPackets == 0 || s.LossPct > threshold }

// passes: the step carried its target: no more loss than the threshold,
// and the generator sent what it was asked to (a path that pushes the
// generator back does not carry the rate either).
func passes(s Step, threshold float64) bool {
	return !lossy(s, threshold) && !s.GenLimited
}

// climbEnd is the index of the step that ended the ramp's climb, or -1: a
// step that lost more than the threshold, or the second of two steps in a
// row where the generator fell short of its target and sent at most 5%
// more than ever before (raising the target no longer raises the load:
// the generator, or the CPU it shares with the forwarder, is spent).
func climbEnd(done []Step, threshold float64) int {
	best, stalled := 0.0, 0
	for i, s := range done {
		if lossy(s, threshold) {
			return i
		}
		if s.GenLimited && i > 0 && s.TxPPS <= plateauGain*best {
			if stalled++; stalled == plateauSteps {
				return i
			}
		} else {
			stalled = 0
		}
		best = max(best, s.TxPPS)
	}
	return -1
}

// next is the rate of the step after done, or false when the ramp is over:
// rising until the climb ends or maxSteps steps, then, after a loss,
// bisecting toward the rate where the loss starts. A climb the generator
// ended is not refined: a lower target cannot make it send more.
func (r *Ramp) next(done []Step, threshold float64, maxSteps int) (float64, bool) {
	end := climbEnd(done, threshold)
	if end < 0 {
		n := len(done)
		if n >= maxSteps {
			return 0, false
		}
		if n == 0 {
			return r.StartPPS, true
		}
		return done[n-1].TargetPPS * r.Factor, true
	}
	if !lossy(done[end], threshold) || len(done)-1-end >= r.Refine {
		return 0, false
	}
	lo, hi := 0.0, done[end].TargetPPS // a loss ends the climb at once: end-1 did not lose
	if end > 0 {
		lo = done[end-1].TargetPPS
	}
	// Each trial lies between lo and hi, so the bracket only narrows. A
	// trial the forwarder carried (even one the generator fell short in)
	// is below the loss.
	for _, s := range done[end+1:] {
		if lossy(s, threshold) {
			hi = s.TargetPPS
		} else {
			lo = s.TargetPPS
		}
	}
	if lo == 0 { // the first rate already lost: halve it
		return hi / 2, true
	}
	return math.Sqrt(lo * hi), true
}
