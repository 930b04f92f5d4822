// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"sluice/internal/bench"
)

// limitedRun is forwarder fw's run in round r: one clean step that
// received pps, and the ceiling the ramp found.
func limitedRun(fw string, r int, pps float64, limit, text string) *bench.RunResult {
	return &bench.RunResult{Label: fw, Forwarder: fw, Round: r, MaxClean: 1,
		Steps:   []bench.Step{{Index: 1, TargetPPS: pps, TxPackets: 1, TxPPS: pps, RxPPS: pps, Clean: true, DurationS: 1}},
		Ceiling: &bench.Ceiling{Limit: limit, Text: text}}
}

// TestCompareSummarySaysWhatSetEachNumber: the text summary has a LIMIT
// column, marks and explains a ratio the generator set, and says per round
// and forwarder what stopped the run, without a second line starting with
// the forwarder's name (the table has one per forwarder).
func TestCompareSummarySaysWhatSetEachNumber(t *testing.T) {
	prof, err := bench.LoadProfile("fixed-64")
	if err != nil {
		t.Fatal(err)
	}
	rep := bench.NewReport("compare", "test", "test", bench.Settings{Profile: prof, Steps: 10, StepSeconds: 1})
	gen := "generator limit: the generator reached only 3.200 Mpps of 3.797 Mpps; the forwarder's ceiling is above"
	rep.Runs = []*bench.RunResult{
		limitedRun("kernel", 1, 1.5e6, bench.LimitForwarder, "forwarder limit at 1.500 Mpps: it lost 0.300% at 1.600 Mpps"),
		limitedRun("xdp-redirect", 1, 3.2e6, bench.LimitGenerator, gen),
		limitedRun("xdp-redirect", 2, 3.0e6, bench.LimitForwarder, "forwarder limit at 3.000 Mpps: it lost 2.000% at 3.100 Mpps"),
		limitedRun("kernel", 2, 1.5e6, bench.LimitForwarder, "forwarder limit at 1.500 Mpps: it lost 0.200% at 1.600 Mpps"),
	}
	f := loadFlags{out: t.TempDir()}
	cmd := &cobra.Command{}
	var out bytes.Buffer
	cmd.SetOut(&out)
	if err := f.finish(cmd, rep, nil); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"VS KERNEL  LIMIT\n",
		"2.07x (2.00-2.13)*  forwarder 1/2, generator 1/2\n",
		"* the ratio xdp-redirect vs kernel was set by the generator, not the forwarders, in 1 of 2 rounds",
		"what set each run's max-clean rate:\n",
		"  round 1, xdp-redirect:  " + gen + "\n",
		"  round 2, kernel:        forwarder limit at 1.500 Mpps",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the summary lacks %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "\n  xdp-redirect "); n != 1 {
		t.Errorf("%d lines start with xdp-redirect, want the table's one:\n%s", n, text)
	}
}
