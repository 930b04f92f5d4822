// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
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
