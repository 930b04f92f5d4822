// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"fmt"

	"sluice/internal/lab"
)

// SearchResult is the outcome of an RFC 2544 binary search.
type SearchResult struct {
	Kind string `json:"kind"` // ndr: no loss; pdr: loss <= threshold
	// RatePPS is the highest offered rate that passed; ReceivedPPS what
	// the sink measured in that trial.
	RatePPS       float64 `json:"rate_pps"`
	ReceivedPPS   float64 `json:"received_pps"`
	ReceivedBPS   float64 `json:"received_bps"`
	Trials        int     `json:"trials"`
	ResolutionPPS float64 `json:"resolution_pps"`
	// PassStep is the index of the trial that found RatePPS (0: none).
	PassStep int `json:"pass_step"`
}

// Search runs an RFC 2544 binary search for the highest rate between 0 and
// o.RateMax whose loss is at most o.LossThreshold (0 for ndr), with
// o.Steps trials of o.StepDuration. A trial passes when its loss is within
// the threshold and the generator reached its target (a path that pushes
// the generator back does not carry the rate either). The first trial is
// at the maximum, so a path that carries it ends the search at once.
func Search(ctx context.Context, l *lab.Lab, o RunOptions, kind string) (*RunResult, error) {
	if kind != "ndr" && kind != "pdr" {
		return nil, fmt.Errorf("--search %q: use ndr or pdr", kind)
	}
	if o.Ramp != nil {
		return nil, fmt.Errorf("--search %s: needs a fixed --rate-max, the top of its binary search (not auto)", kind)
	}
	if kind == "ndr" {
		o.LossThreshold = 0
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	hi := o.RateMax.PPS(o.Profile)
	lo := 0.0
	sr := &SearchResult{Kind: kind}
	res, err := runAdaptive(ctx, l, o, func(done []Step) (float64, bool) {
		if n := len(done); n > 0 {
			last := done[n-1]
			if passes(last, o.LossThreshold) {
				if last.TargetPPS > sr.RatePPS {
					sr.RatePPS, sr.ReceivedPPS, sr.ReceivedBPS, sr.PassStep = last.TargetPPS, last.RxPPS, last.RxBPS, last.Index
				}
				lo = last.TargetPPS
				if n == 1 { // the maximum passed
					return 0, false
				}
			} else {
				hi = last.TargetPPS
			}
		}
		if len(done) >= o.Steps {
			return 0, false
		}
		if len(done) == 0 {
			return hi, true
		}
		return (lo + hi) / 2, true
	})
	if res != nil {
		sr.Trials = len(res.Steps)
		sr.ResolutionPPS = hi - lo
		res.Search = sr
	}
	return res, err
}
