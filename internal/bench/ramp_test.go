// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"math"
	"strings"
	"testing"
)

// path models a forwarder beside a generator: the generator sends at most
// genMax, and share of its target when set (a busy CPU: its thread waits),
// and the forwarder loses what it is sent above capacity.
type path struct{ capacity, genMax, share float64 }

// step is what the lab would measure at target over one second.
func (p path) step(index int, target float64) Step {
	tx := math.Min(target, p.genMax)
	if p.share > 0 {
		tx = math.Min(tx, p.share*target)
	}
	rx := math.Min(tx, p.capacity)
	s := Step{Index: index, TargetPPS: target, DurationS: 1, TxPPS: tx, RxPPS: rx,
		TxPackets: uint64(tx), RxPackets: uint64(rx), Lost: uint64(tx) - uint64(rx)}
	s.LossPct = 100 * float64(s.Lost) / float64(s.TxPackets)
	s.GenLimited = tx < 0.97*target // as meter.step sets it
	return s
}

// ramped drives the ramp against p as runAdaptive does, with a 0.1% loss
// threshold and at most maxSteps rising steps, and finishes the run.
func ramped(t *testing.T, r Ramp, p path, maxSteps int) *RunResult {
	t.Helper()
	run := &RunResult{Label: "fw", Forwarder: "sluice", LossThreshold: 0.1, Ramp: &r}
	for {
		rate, ok := r.next(run.Steps, run.LossThreshold, maxSteps)
		if !ok {
			break
		}
		if len(run.Steps) > 100 {
			t.Fatalf("the ramp does not stop: %d steps", len(run.Steps))
		}
		run.Steps = append(run.Steps, p.step(len(run.Steps)+1, rate))
	}
	run.finish()
	return run
}

func targets(run *RunResult) []float64 {
	var v []float64
	for _, s := range run.Steps {
		v = append(v, math.Round(s.TargetPPS))
	}
	return v
}

// TestRampFindsTheForwardersCeiling: the rate rises by the factor until the
// forwarder loses, then bisects toward its capacity, and the run says the
// forwarder set the number.
func TestRampFindsTheForwardersCeiling(t *testing.T) {
	run := ramped(t, Ramp{StartPPS: 500e3, Factor: 2, Refine: 4}, path{capacity: 2.6e6, genMax: 20e6}, 10)
	got := targets(run)
	// 0.5, 1, 2 pass; 4 loses; then sqrt(2*4)=2.83 loses, sqrt(2*2.83)=2.38
	// passes, sqrt(2.38*2.83)=2.59 passes, sqrt(2.59*2.83)=2.71 loses.
	want := []float64{500e3, 1e6, 2e6, 4e6, 2828427, 2378414, 2593679, 2708511}
	if len(got) != len(want) {
		t.Fatalf("rates %v, want %v: rising by 2 to the first loss, then 4 trials", got, want)
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1 {
			t.Fatalf("rates %v, want %v", got, want)
		}
	}
	c := run.Ceiling
	if c == nil || c.Limit != LimitForwarder || c.Step != 8 || math.Abs(c.RatePPS-2593679) > 1 || !c.SetByForwarder() {
		t.Fatalf("ceiling %+v, want the forwarder's at step 7's 2.59 Mpps, shown by step 8", c)
	}
	if want := "forwarder limit at 2.594 Mpps: it lost 4.006% at 2.709 Mpps"; c.Text != want {
		t.Errorf("text %q, want %q", c.Text, want)
	}
}

// TestRampStopsWhereTheGeneratorFallsShort: when the generator falls short
// of its target and stops gaining, the ramp stops (raising the target
// further measures nothing more; a lower one cannot make it send more, so
// there is no refining), and the run says the generator set the number,
// not the forwarder.
func TestRampStopsWhereTheGeneratorFallsShort(t *testing.T) {
	run := ramped(t, Ramp{StartPPS: 1e6, Factor: 1.5, Refine: 4}, path{capacity: 9e6, genMax: 3.2e6}, 10)
	// 3.375 Mpps: short (3.2 sent) but gaining on 2.25; 5.06 and 7.59:
	// 3.2 again, twice.
	if got := targets(run); len(got) != 6 || got[3] != 3375000 || got[5] != 7593750 {
		t.Fatalf("rates %v, want 1, 1.5, 2.25, 3.375, 5.06, 7.59 Mpps and a stop where the generator stopped gaining twice", got)
	}
	c := run.Ceiling
	if c == nil || c.Limit != LimitGenerator || c.Step != 4 || c.RatePPS != 3.2e6 || c.SetByForwarder() {
		t.Fatalf("ceiling %+v, want the generator's at step 4 (3.2 of 3.375 Mpps sent, none lost)", c)
	}
	if want := "generator limit: the generator reached only 3.200 Mpps of 3.375 Mpps; the forwarder's ceiling is above"; c.Text != want {
		t.Errorf("text %q, want %q", c.Text, want)
	}
	// A step that loses is the forwarder's limit even when the generator
	// also fell short: the forwarder did not carry what it was sent.
	both := ramped(t, Ramp{StartPPS: 1e6, Factor: 1.5, Refine: 0}, path{capacity: 2.8e6, genMax: 3.2e6}, 10)
	if c := both.Ceiling; c == nil || c.Limit != LimitForwarder || c.Step != 4 {
		t.Errorf("ceiling %+v, want the forwarder's: step 4 lost while the generator fell short", c)
	}
}

// TestRampClimbsThroughABusyCPU: a generator that gets only part of its CPU
// falls short at every rate, by a share that follows the target; the ramp
// goes on while it gains and finds the forwarder's loss.
func TestRampClimbsThroughABusyCPU(t *testing.T) {
	run := ramped(t, Ramp{StartPPS: 500e3, Factor: 1.5, Refine: 2}, path{capacity: 2.6e6, genMax: 20e6, share: 0.8}, 10)
	// 0.5 .. 2.53 Mpps sent at 80% and carried; 3.80 sends 3.04 and loses;
	// then sqrt(2.53*3.80)=3.10 sends 2.48, carried; sqrt(3.10*3.80)=3.43
	// sends 2.75 and loses.
	want := []float64{500e3, 750e3, 1125e3, 1687500, 2531250, 3796875, 3100135, 3430864}
	got := targets(run)
	if len(got) != len(want) {
		t.Fatalf("rates %v, want %v", got, want)
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1 {
			t.Fatalf("rates %v, want %v", got, want)
		}
	}
	if c := run.Ceiling; c == nil || c.Limit != LimitForwarder || c.Step != 8 || math.Abs(c.RatePPS-0.8*3100135) > 1 {
		t.Errorf("ceiling %+v, want the forwarder's at the 2.48 Mpps step 7 carried, shown by step 8", c)
	}
}

// TestRampEdges: a ramp that never fails stops after the rising steps and
// says the ceiling is above; one whose first rate fails halves it.
func TestRampEdges(t *testing.T) {
	run := ramped(t, Ramp{StartPPS: 1e6, Factor: 2, Refine: 3}, path{capacity: 1e9, genMax: 1e9}, 5)
	if got := targets(run); len(got) != 5 || got[4] != 16e6 {
		t.Fatalf("rates %v, want 5 rising steps to 16 Mpps", got)
	}
	if c := run.Ceiling; c == nil || c.Limit != LimitNone || c.RatePPS != 16e6 ||
		c.Text != "no limit reached: every step up to 16.000 Mpps passed; the forwarder's ceiling is above (raise --steps)" {
		t.Fatalf("ceiling %+v, want none, with the hint to raise --steps", c)
	}
	low := ramped(t, Ramp{StartPPS: 1e6, Factor: 2, Refine: 2}, path{capacity: 300e3, genMax: 1e9}, 5)
	if got := targets(low); len(got) != 3 || got[1] != 500e3 || got[2] != 250e3 {
		t.Fatalf("rates %v, want 1 Mpps, then halved twice", got)
	}
	if c := low.Ceiling; c == nil || c.Limit != LimitForwarder || c.RatePPS != 250e3 {
		t.Errorf("ceiling %+v, want the forwarder's at 250 kpps", c)
	}
	none := ramped(t, Ramp{StartPPS: 1e6, Factor: 2, Refine: 0}, path{capacity: 100e3, genMax: 1e9}, 5)
	if c := none.Ceiling; c == nil || c.Limit != LimitForwarder || c.RatePPS != 0 || !strings.Contains(c.Text, "no step was clean") {
		t.Errorf("ceiling %+v, want the forwarder's below the first rate", c)
	}
}

// TestFixedRunsSayWhatSetTheirNumber: linear steps (an explicit --rate-max)
// are classified the same way; the demo's old 3 Mpps top that two XDP
// forwarders both carried is reported as no limit, with the flag to raise.
func TestFixedRunsSayWhatSetTheirNumber(t *testing.T) {
	linear := func(p path) *RunResult {
		run := &RunResult{Label: "fw", LossThreshold: 0.1, RateMax: Rate{Value: 3e6, Unit: "pps"}}
		for i := 1; i <= 10; i++ {
			run.Steps = append(run.Steps, p.step(i, 3e6*float64(i)/10))
		}
		run.finish()
		return run
	}
	if c := linear(path{capacity: 5e6, genMax: 20e6}).Ceiling; c.Limit != LimitNone || !strings.HasSuffix(c.Text, "(raise --rate-max)") {
		t.Errorf("a run that carried the top: %+v, want none and the hint to raise --rate-max", c)
	}
	if c := linear(path{capacity: 1.6e6, genMax: 20e6}).Ceiling; c.Limit != LimitForwarder || c.Step != 6 || c.RatePPS != 1.5e6 {
		t.Errorf("the kernel at 1.6 Mpps: %+v, want the forwarder's limit at step 5's 1.5 Mpps, shown by step 6", c)
	}
	if c := linear(path{capacity: 5e6, genMax: 2.5e6}).Ceiling; c.Limit != LimitGenerator || c.Step != 9 || c.RatePPS != 2.5e6 {
		t.Errorf("a generator that reaches 2.5 Mpps: %+v, want the generator's limit in step 9 (2.5 of 2.7 Mpps)", c)
	}
	// The generator passed 1 Mpps, then, starved, sent 600 kpps of 1.5:
	// the number is the generator's, and the text gives both steps.
	dip := &RunResult{LossThreshold: 0.1, RateMax: Rate{Value: 1.5e6, Unit: "pps"}, Steps: []Step{
		{Index: 1, TargetPPS: 1e6, TxPPS: 1e6, RxPPS: 1e6, TxPackets: 1},
		{Index: 2, TargetPPS: 1.5e6, TxPPS: 600e3, RxPPS: 600e3, TxPackets: 1, GenLimited: true}}}
	dip.finish()
	if c := dip.Ceiling; c.Limit != LimitGenerator || c.Step != 2 || c.RatePPS != 1e6 ||
		c.Text != "generator limit at 1.000 Mpps: in the step above, the generator reached only 600.0 kpps of 1.500 Mpps; the forwarder's ceiling is above" {
		t.Errorf("a generator starved above the max-clean step: %+v", c)
	}
	// Without a forwarder (the direct topology) the sink is what carries.
	dip.Topology = "direct"
	dip.finish()
	if c := dip.Ceiling; !strings.HasSuffix(c.Text, "; the sink's ceiling is above") {
		t.Errorf("direct: %q, want the sink named", c.Text)
	}
	// Short of its target in every step (90%), and the forwarder loses
	// above 2 Mpps: the loss is the evidence, the forwarder's limit.
	if c := linear(path{capacity: 2e6, genMax: 20e6, share: 0.9}).Ceiling; c.Limit != LimitForwarder || c.Step != 8 || math.Abs(c.RatePPS-1.89e6) > 1 {
		t.Errorf("a busy generator and a forwarder losing above 2 Mpps: %+v, want the forwarder's limit at step 7's 1.89 Mpps, shown by step 8", c)
	}
}

// TestAutoParsesAndValidates: "auto" is --rate-max's ramp, and the ramp's
// flags are checked with their names.
func TestAutoParsesAndValidates(t *testing.T) {
	if r, auto, err := ParseRateMax("--rate-max", " Auto "); !auto || err != nil || r != (Rate{Unit: "pps"}) {
		t.Errorf("auto: %v %v", auto, err)
	}
	if r, auto, err := ParseRateMax("--rate-max", "2Mpps"); auto || err != nil || r.Value != 2e6 {
		t.Errorf("2Mpps: %+v %v %v", r, auto, err)
	}
	if _, _, err := ParseRateMax("--rate-max", "fast"); err == nil || !strings.Contains(err.Error(), "or auto") {
		t.Errorf("a bad --rate-max must name auto too: %v", err)
	}
	for _, c := range []struct {
		r    Ramp
		flag string
	}{{Ramp{0, 1.5, 4}, "--rate-start"}, {Ramp{1e6, 1, 4}, "--rate-factor"}, {Ramp{1e6, math.NaN(), 4}, "--rate-factor"}, {Ramp{1e6, 1.5, 21}, "--refine"}} {
		if err := c.r.Validate(); err == nil || !strings.HasPrefix(err.Error(), c.flag) {
			t.Errorf("%+v: %v, want an error naming %s", c.r, err, c.flag)
		}
	}
	o := RunOptions{Profile: &Profile{Name: "p"}, Steps: 10, StepDuration: 1e9, Ramp: &Ramp{1e6, 1.5, 4}, GenCPUs: []int{0}}
	if err := o.Validate(); err != nil {
		t.Errorf("a ramp needs no --rate-max: %v", err)
	}
}

// TestClimbEndNeedsTwoStalls: one step where a starved generator sent less
// than before is noise; the climb ends at the second such step in a row,
// or at once where the forwarder loses.
func TestClimbEndNeedsTwoStalls(t *testing.T) {
	short := func(target, sent float64) Step {
		return Step{TargetPPS: target, TxPPS: sent, TxPackets: 1, GenLimited: true}
	}
	steps := []Step{short(500e3, 400e3), short(750e3, 300e3), short(1.125e6, 900e3), short(1.6875e6, 920e3), short(2.53e6, 930e3)}
	if got := climbEnd(steps, 0); got != 4 {
		t.Errorf("climb ended at step index %d, want 4: the dip at 1 is followed by a gain, 3 and 4 stall", got)
	}
	if got := climbEnd(steps[:4], 0); got != -1 {
		t.Errorf("climb ended at %d after one stall, want it to go on", got)
	}
	steps[2].LossPct = 1
	if got := climbEnd(steps, 0); got != 2 {
		t.Errorf("climb ended at %d, want 2, the step that lost", got)
	}
}
