// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"

	"sluice/internal/lab"
)

// What set a run's max-clean rate (Ceiling.Limit).
const (
	// LimitForwarder: the forwarder lost more than the threshold just
	// above the max-clean rate; that rate is the forwarder's ceiling.
	LimitForwarder = "forwarder"
	// LimitGenerator: the generator could not send its target while the
	// forwarder still carried what it was sent; the forwarder's ceiling
	// is above the number.
	LimitGenerator = "generator"
	// LimitNone: every step passed; the load stopped below the ceiling.
	LimitNone = "none"
)

// Ceiling says what set a run's max-clean rate, in words and numbers, so a
// number the generator or the load's top set is never read as the
// forwarder's.
type Ceiling struct {
	Limit string `json:"limit"` // forwarder, generator or none
	// Step is the step that showed the limit (0 with none): for the
	// generator, the max-clean step when the generator fell short in it;
	// otherwise the first failing step above the max-clean one.
	Step int `json:"step"`
	// RatePPS is the run's max-clean received rate: the forwarder's
	// ceiling (forwarder) or a lower bound of it (generator, none).
	RatePPS float64 `json:"rate_pps"`
	// TargetPPS, SentPPS and LossPct are the limiting step's (with none:
	// the highest step's).
	TargetPPS float64 `json:"target_pps"`
	SentPPS   float64 `json:"sent_pps"`
	LossPct   float64 `json:"loss_pct"`
	// Text is the sentence the summary, the HTML and this field give.
	Text string `json:"text"`
}

// SetByForwarder reports whether the forwarder, not the generator or the
// load's top, set the number.
func (c *Ceiling) SetByForwarder() bool { return c != nil && c.Limit == LimitForwarder }

// ceiling classifies a finished run. Above the max-clean step, a step
// that lost more than the threshold shows the forwarder's limit (whatever
// the generator did: the forwarder did not carry what it was sent); without
// one, a step where the generator fell short of its target shows the
// generator's, and the max-clean step itself counts when the generator fell
// short in it. The lowest such step is the one named. auto says the load
// was a ramp (for the hint in the text).
func (r *RunResult) ceiling(auto bool) *Ceiling {
	if len(r.Steps) == 0 {
		return nil
	}
	// In the direct topology the generator sends straight into the sink:
	// what loses or carries is the sink.
	fwd := "forwarder"
	if r.Topology == lab.Direct {
		fwd = "sink"
	}
	m := r.MaxCleanStep()
	if m == nil { // every step lost: the lowest rate already was too much
		low := &r.Steps[0]
		for i := range r.Steps {
			if r.Steps[i].TargetPPS < low.TargetPPS {
				low = &r.Steps[i]
			}
		}
		return &Ceiling{Limit: LimitForwarder, Step: low.Index, TargetPPS: low.TargetPPS, SentPPS: low.TxPPS, LossPct: low.LossPct,
			Text: fmt.Sprintf("%s limit below %s: no step was clean, it lost %.3f%% at %s, the lowest rate", fwd, FormatPPS(low.TxPPS), low.LossPct, FormatPPS(low.TxPPS))}
	}
	c := &Ceiling{RatePPS: m.RxPPS}
	// lowest returns the lowest-target step above the max-clean one that
	// is, by is, or nil.
	lowest := func(is func(Step) bool) *Step {
		var found *Step
		for i := range r.Steps {
			s := &r.Steps[i]
			if s.TargetPPS > m.TargetPPS && is(*s) && (found == nil || s.TargetPPS < found.TargetPPS) {
				found = s
			}
		}
		return found
	}
	lim := lowest(func(s Step) bool { return lossy(s, r.LossThreshold) })
	if lim == nil && m.GenLimited {
		lim = m
	}
	if lim == nil {
		lim = lowest(func(s Step) bool { return s.GenLimited })
	}
	if lim == nil {
		top := m
		for i := range r.Steps {
			if r.Steps[i].TargetPPS > top.TargetPPS {
				top = &r.Steps[i]
			}
		}
		c.Limit, c.TargetPPS, c.SentPPS, c.LossPct = LimitNone, top.TargetPPS, top.TxPPS, top.LossPct
		raise := "--rate-max"
		if auto {
			raise = "--steps"
		}
		c.Text = fmt.Sprintf("no limit reached: every step up to %s passed; the %s's ceiling is above (raise %s)", FormatPPS(top.TargetPPS), fwd, raise)
		return c
	}
	c.Step, c.TargetPPS, c.SentPPS, c.LossPct = lim.Index, lim.TargetPPS, lim.TxPPS, lim.LossPct
	if lossy(*lim, r.LossThreshold) {
		c.Limit = LimitForwarder
		c.Text = fmt.Sprintf("%s limit at %s: it lost %.3f%% at %s", fwd, FormatPPS(m.RxPPS), lim.LossPct, FormatPPS(lim.TxPPS))
		return c
	}
	c.Limit = LimitGenerator
	if lim == m {
		c.Text = fmt.Sprintf("generator limit: the generator reached only %s of %s; the %s's ceiling is above", FormatPPS(lim.TxPPS), FormatPPS(lim.TargetPPS), fwd)
	} else { // a starved generator sent less in the step above than in the max-clean one
		c.Text = fmt.Sprintf("generator limit at %s: in the step above, the generator reached only %s of %s; the %s's ceiling is above", FormatPPS(m.RxPPS), FormatPPS(lim.TxPPS), FormatPPS(lim.TargetPPS), fwd)
	}
	return c
}
