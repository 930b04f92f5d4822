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
// starts at StartPPS and rises by Factor per step until a step fails (it
// loses more than the loss threshold, or the generator falls short of its
// target) or RunOptions.Steps steps have run; then Refine trials bisect,
// geometrically, between the highest rate that passed and the lowest that
// failed. Every forwarder of a compare climbs the same rates.
type Ramp struct {
	StartPPS float64 `json:"start_pps"`
	Factor   float64 `json:"factor"`
	Refine   int     `json:"refine"`
}

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

// passes: the step carried its target: no more loss than the threshold,
// and the generator sent what it was asked to (a path that pushes the
// generator back does not carry the rate either).
func passes(s Step, threshold float64) bool {
	return s.TxPackets > 0 && s.LossPct <= threshold && !s.GenLimited
}

// next is the rate of the step after done, or false when the ramp is over:
// rising until the first failure or maxSteps steps, then bisecting.
func (r *Ramp) next(done []Step, threshold float64, maxSteps int) (float64, bool) {
	first := -1 // the first failing step: the end of the climb
	for i, s := range done {
		if !passes(s, threshold) {
			first = i
			break
		}
	}
	if first < 0 {
		n := len(done)
		if n >= maxSteps {
			return 0, false
		}
		if n == 0 {
			return r.StartPPS, true
		}
		return done[n-1].TargetPPS * r.Factor, true
	}
	if len(done)-1-first >= r.Refine {
		return 0, false
	}
	lo, hi := 0.0, done[first].TargetPPS
	if first > 0 {
		lo = done[first-1].TargetPPS
	}
	// Each trial lies between lo and hi, so the bracket only narrows.
	for _, s := range done[first+1:] {
		if passes(s, threshold) {
			lo = s.TargetPPS
		} else {
			hi = s.TargetPPS
		}
	}
	if lo == 0 { // the first rate already failed: halve it
		return hi / 2, true
	}
	return math.Sqrt(lo * hi), true
}
