// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"sluice/internal/bench"
	"sluice/internal/lab"
)

func newBenchCompareCmd() *cobra.Command {
	var f benchCompareFlags
	cmd := &cobra.Command{
		Use:   "compare",
		Short: "The same stepped load through several forwarders, in one report",
		Long: `Run the same traffic, with the same steps, through each forwarder in turn in one
lab, and write one report with every run overlaid:

  kernel        Linux IP forwarding
  xdp-redirect  a bare XDP redirect forwarder: the ceiling of XDP forwarding
                on this machine
  sluice        sluice's gateway fast path with the lab's tunnels as static,
                packet-offloaded policies

The load has no fixed top by default (--rate-max auto): it starts at
--rate-start and rises by --rate-factor per step until the forwarder loses
more than --loss-threshold or the generator falls short of its target, then
--refine trials bisect between the last rate that passed and the first that
failed. An explicit --rate-max gives linear steps up to it instead.

The summary gives each forwarder's max-clean rate (pps and L2 Gbps), its
ratio to the first forwarder (put kernel first), and what set each run's
number: "forwarder limit at X", "generator limit: the generator reached
only X of Y; the forwarder's ceiling is above", or "no limit reached" (the
load's top). A ratio that a generator limit or the load's top set in any
round is marked with * and said so. On veth nothing encrypts:
the comparison measures the forwarding path; on a packet-offload NIC the NIC
encrypts. The generator, the forwarder and the sink share the machine's
CPUs, so a forwarder's rate includes their cost; see docs/bench.md.

A shared or busy machine drifts by more than the difference between two
forwarders over the minute that separates their runs. --rounds N repeats
the comparison N times, every other round in reverse order (A B C, C B A,
...), so slow drift weighs on every forwarder alike; the summary then gives
each forwarder's median over the rounds and the median of its per-round
ratios with their range. Needs root.`,
		Example: `  sluice bench compare --topology forwarder --forwarders kernel,xdp-redirect,sluice --profile imix-mno-1
  sluice bench compare --forwarders xdp-redirect,sluice --rate-max auto --rate-start 1Mpps --rate-factor 1.25 --rounds 3
  sluice bench compare --topology forwarder --forwarders xdp-redirect,sluice --rounds 5 --steps 10
  sluice bench compare --topology gateway-pair --tunnels 1024 --forwarders kernel,sluice --rate-max 2Mpps --steps 8 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchCompare(cmd, f) },
	}
	f.load.register(cmd, true, bench.RateMaxAuto)
	cmd.Flags().IntVar(&f.rounds, "rounds", 1, "repeat the comparison this many times, alternating the order; the summary gives medians")
	cmd.Flags().StringVar(&f.forwarders, "forwarders", strings.Join(lab.Forwarders, ","), "forwarders to compare, in order (the first is the reference)")
	return cmd
}

type benchCompareFlags struct {
	load       loadFlags
	forwarders string
	rounds     int
}

func runBenchCompare(cmd *cobra.Command, f benchCompareFlags) error {
	var fwds []string
	for _, fw := range strings.Split(f.forwarders, ",") {
		fw = strings.TrimSpace(fw)
		if !slices.Contains(lab.Forwarders, fw) {
			return usageErrorf("--forwarders: %q is not one of %s", fw, strings.Join(lab.Forwarders, ", "))
		}
		if slices.Contains(fwds, fw) {
			return usageErrorf("--forwarders: %s is listed twice", fw)
		}
		fwds = append(fwds, fw)
	}
	if f.rounds < 1 || f.rounds > 50 {
		return usageErrorf("--rounds %d: use 1 to 50", f.rounds)
	}
	o, err := f.load.runOptions()
	if err != nil {
		return err
	}
	log := cmd.ErrOrStderr()
	progress := func(s string) { fmt.Fprintln(log, s) }
	l, cleanup, err := f.load.tempLab(progress)
	if err != nil {
		return err
	}
	defer cleanup()
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	rep := f.load.newReport("compare", o)
	var runErr error
rounds:
	for r := 1; r <= f.rounds; r++ {
		for _, fw := range compareOrder(fwds, r) {
			if err := l.SetForwarder(fw, lab.ForwarderOptions{}, progress); err != nil {
				runErr = err
				break rounds
			}
			o.Label = fw
			if f.rounds > 1 {
				o.Label = fmt.Sprintf("%s #%d", fw, r)
			}
			o.Progress = benchStepPrinter(log, o.Label, stepTotal(o))
			o.Tick = benchTicker(log, o.Label, stepTotal(o))
			run, err := bench.Run(ctx, l, o)
			if run != nil && len(run.Steps) > 0 {
				if f.rounds > 1 {
					run.Round = r
				}
				rep.Runs = append(rep.Runs, run)
			}
			if err != nil {
				runErr = err
				break rounds
			}
		}
	}
	if len(rep.Runs) == 0 {
		if runErr == nil {
			runErr = errors.New("no run completed")
		}
		return runErr
	}
	return f.load.finish(cmd, rep, runErr)
}

// compareOrder is the order of round r (1-based): as given in odd rounds,
// reversed in even ones, so a machine that slows down (or speeds up) over
// the run favours no forwarder in the medians.
func compareOrder(fwds []string, r int) []string {
	if r%2 == 1 {
		return fwds
	}
	rev := slices.Clone(fwds)
	slices.Reverse(rev)
	return rev
}
