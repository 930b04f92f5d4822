// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"html"
	"math"
	"strings"
	"testing"
)

// roundRun is a run of forwarder fw in round r whose one clean step
// received pps.
func roundRun(fw string, r int, pps float64) *RunResult {
	run := &RunResult{Label: fw, Forwarder: fw, Round: r,
		Steps: []Step{{Index: 1, TxPackets: 1, RxPPS: pps, RxBPS: pps * 512, Latency: Latency{P99Us: pps / 1e5}}}}
	run.finish()
	return run
}

// threeRounds is a compare of kernel and sluice over three rounds, the
// order reversed in round 2; medians: kernel 1.0 Mpps (round 1), sluice
// 2.25 Mpps (round 3); per-round ratios 2.0, 1.8, 2.5.
func threeRounds() *Report {
	return &Report{Runs: []*RunResult{
		roundRun("kernel", 1, 1.0e6), roundRun("sluice", 1, 2.0e6),
		roundRun("sluice", 2, 2.7e6), roundRun("kernel", 2, 1.5e6),
		roundRun("kernel", 3, 0.9e6), roundRun("sluice", 3, 2.25e6),
	}}
}

// TestSummariesOverRounds: with rounds, one line per forwarder with the
// medians of its rounds, and a ratio that pairs each run with the
// reference's run of the same round (not the ratio of the medians).
func TestSummariesOverRounds(t *testing.T) {
	rep := threeRounds()
	sums := rep.Summaries()
	if len(sums) != 2 || sums[0].Label != "kernel" || sums[1].Label != "sluice" {
		t.Fatalf("summaries %+v, want kernel then sluice", sums)
	}
	k, s := sums[0], sums[1]
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9*math.Max(1, math.Abs(b)) }
	if k.Rounds != 3 || !near(k.MaxCleanPPS, 1.0e6) || !near(k.RatioToFirst, 1) {
		t.Errorf("kernel: %+v, want 3 rounds, median 1 Mpps, ratio 1", k)
	}
	// per-round ratios 2.0, 1.8, 2.5: median 2.0; the ratio of the
	// medians would be 2.25.
	if !near(s.MaxCleanPPS, 2.25e6) || !near(s.RatioToFirst, 2.0) || !near(s.RatioMin, 1.8) || !near(s.RatioMax, 2.5) {
		t.Errorf("sluice: %+v, want median 2.25 Mpps, ratio 2.0 (1.8-2.5)", s)
	}
	if !near(s.PeakRxPPS, 2.7e6) || !near(s.MaxCleanBPS, 2.25e6*512) || !near(s.P99AtClean, 22.5) {
		t.Errorf("sluice: %+v, want peak 2.7 Mpps and medians of bps and p99", s)
	}

	// Without rounds every run is a line of its own, as before.
	single := &Report{Runs: []*RunResult{roundRun("kernel", 0, 1e6), roundRun("sluice", 0, 3e6), roundRun("sluice", 0, 2e6)}}
	if sums := single.Summaries(); len(sums) != 3 || !near(sums[1].RatioToFirst, 3) || !near(sums[2].RatioToFirst, 2) {
		t.Errorf("single round: %+v, want three lines, ratios 1, 3, 2", sums)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestCompareReportSaysRounds(t *testing.T) {
	rep := &Report{Settings: Settings{Profile: &Profile{Name: "fixed-64"}}, Runs: []*RunResult{
		roundRun("kernel", 1, 1e6), roundRun("sluice", 1, 2e6), roundRun("sluice", 2, 2.4e6), roundRun("kernel", 2, 1e6)}}
	b, err := rep.HTML(nil)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	if !strings.Contains(html, "Medians of 2 rounds") || !strings.Contains(html, "2.20x (2.00-2.40)") {
		t.Errorf("the summary does not say it is a median of 2 rounds with the ratio's range")
	}
}

// TestChartLooksWithRounds: every round of a forwarder in its colour, one
// legend entry per forwarder, and only its median round annotated.
func TestChartLooksWithRounds(t *testing.T) {
	rep := threeRounds()
	looks := rep.looks()
	var legends, labelled []string
	for i, l := range looks {
		if l.legend != "" {
			legends = append(legends, l.legend)
		}
		if l.label != "" {
			labelled = append(labelled, fmt.Sprintf("%s #%d", rep.Runs[i].Forwarder, rep.Runs[i].Round))
		}
		if same := looks[0].col; (rep.Runs[i].Forwarder == "kernel") != (l.col == same) {
			t.Errorf("run %d (%s): colour shared with kernel = %v", i, rep.Runs[i].Forwarder, l.col == same)
		}
	}
	if strings.Join(legends, ",") != "kernel (3 rounds),sluice (3 rounds)" {
		t.Errorf("legend %v, want one entry per forwarder", legends)
	}
	// medians: kernel 1.0 Mpps (round 1), sluice 2.25 Mpps (round 3)
	if strings.Join(labelled, ",") != "kernel #1,sluice #3" {
		t.Errorf("annotated %v, want each forwarder's median round", labelled)
	}
	single := (&Report{Runs: []*RunResult{roundRun("kernel", 0, 1e6), roundRun("sluice", 0, 2e6)}}).looks()
	if single[0].legend != "kernel" || single[1].legend != "sluice" || single[0].col == single[1].col || single[1].label == "" {
		t.Errorf("without rounds every run has its own colour, legend entry and label: %+v", single)
	}
}

// rampedCompare is a compare over three rounds whose runs ramped against
// modelled paths: the kernel loses at 1.6 Mpps; xdp-redirect carries
// 9 Mpps but the generator reaches 3.2 Mpps in rounds 1 and 3 (it loses
// at 2.9 Mpps in round 2); sluice loses at 2.6 Mpps.
func rampedCompare(t *testing.T) *Report {
	t.Helper()
	prof, err := LoadProfile("imix-mno-1")
	if err != nil {
		t.Fatal(err)
	}
	ramp := Ramp{StartPPS: 500e3, Factor: 1.5, Refine: 3}
	rep := &Report{Kind: "compare", Settings: Settings{Profile: prof, Steps: 10, StepSeconds: 1, Ramp: &ramp, LossThreshold: 0.1}}
	for r := 1; r <= 3; r++ {
		redirect := path{capacity: 9e6, genMax: 3.2e6}
		if r == 2 {
			redirect = path{capacity: 2.9e6, genMax: 3.2e6}
		}
		for _, fw := range []struct {
			name string
			p    path
		}{{"kernel", path{capacity: 1.6e6, genMax: 20e6}}, {"xdp-redirect", redirect}, {"sluice", path{capacity: 2.6e6, genMax: 20e6}}} {
			run := ramped(t, ramp, fw.p, 10)
			run.Label, run.Forwarder, run.Round = fmt.Sprintf("%s #%d", fw.name, r), fw.name, r
			rep.Runs = append(rep.Runs, run)
		}
	}
	return rep
}

// TestRatiosSayWhenTheGeneratorSetThem: the summary counts, per forwarder,
// what set its numbers, and a ratio any of whose rounds had a number the
// generator set says so, in the summary and in report.html with every
// run's sentence.
func TestRatiosSayWhenTheGeneratorSetThem(t *testing.T) {
	rep := rampedCompare(t)
	sums := rep.Summaries()
	if len(sums) != 3 {
		t.Fatalf("summaries %+v", sums)
	}
	k, x, s := sums[0], sums[1], sums[2]
	if k.LimitText() != "forwarder 3/3" || k.RatioNote() != "" {
		t.Errorf("kernel: limit %q, note %q; want forwarder 3/3 and no note (the reference)", k.LimitText(), k.RatioNote())
	}
	if x.LimitText() != "forwarder 1/3, generator 2/3" || x.Ratios != 3 || x.RatiosByGenerator != 2 ||
		x.RatioNote() != "set by the generator, not the forwarders, in 2 of 3 rounds" {
		t.Errorf("xdp-redirect: limit %q, %d/%d ratios by the generator, note %q", x.LimitText(), x.RatiosByGenerator, x.Ratios, x.RatioNote())
	}
	if s.LimitText() != "forwarder 3/3" || s.RatiosByGenerator != 0 || s.RatioNote() != "" {
		t.Errorf("sluice: limit %q, note %q; want the forwarders' ratio in every round", s.LimitText(), s.RatioNote())
	}
	// A reference the generator limited makes every ratio of its round the
	// generator's.
	ref := rep.Runs[0]
	ref.Ceiling = &Ceiling{Limit: LimitGenerator, Text: "generator limit"}
	if s := rep.Summaries()[2]; s.RatiosByGenerator != 1 {
		t.Errorf("sluice against a generator-limited kernel in round 1: %d ratios by the generator, want 1", s.RatiosByGenerator)
	}
	ref.Ceiling = &Ceiling{Limit: LimitNone, Text: "no limit"}
	if s := rep.Summaries()[2]; s.RatiosByTop != 1 || !strings.Contains(s.RatioNote(), "set by the load's top (no limit reached), not the forwarders, in 1 of 3 rounds") {
		t.Errorf("sluice against a kernel that reached the top: %+v %q", s, s.RatioNote())
	}

	rep = rampedCompare(t)
	b, err := rep.HTML(nil)
	if err != nil {
		t.Fatal(err)
	}
	page := html.UnescapeString(string(b))
	for _, want := range []string{
		"<th class=\"l\">limit</th>",
		"forwarder 1/3, generator 2/3",
		"* the ratio xdp-redirect vs kernel was set by the generator, not the forwarders, in 2 of 3 rounds",
		"round 1, xdp-redirect: generator limit: the generator reached only 3.200 Mpps of 3.797 Mpps; the forwarder's ceiling is above",
		"round 2, xdp-redirect: forwarder limit at",
		"round 3, kernel: forwarder limit at",
		"a ramp of 1 s steps: from 500.0 kpps, ×1.5 per step (at most 10 steps)",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if strings.Contains(page, "the ratio sluice vs kernel") {
		t.Error("report.html flags sluice's ratio, which the forwarders set in every round")
	}
}
