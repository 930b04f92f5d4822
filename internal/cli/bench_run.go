// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"sluice/internal/bench"
	"sluice/internal/lab"
)

// loadFlags are the traffic flags shared by 'bench run' and 'bench compare'.
type loadFlags struct {
	labName, topology, profile, rateMax, rateStart, genCPUs, out string
	tunnels, steps, refine                                       int
	stepSeconds, lossThreshold, rateFactor                       float64
	asJSON                                                       bool
}

// register declares the load flags; rateMax is --rate-max's default (a
// rate, or auto for the ramp).
func (f *loadFlags) register(cmd *cobra.Command, withLab bool, rateMax string) {
	fl := cmd.Flags()
	if withLab {
		fl.StringVar(&f.labName, "lab", "", "use this lab (from 'sluice lab up'); default: build a temporary one from --topology")
	}
	fl.StringVar(&f.topology, "topology", lab.Forwarder, "topology of the temporary lab: "+lab.Forwarder+", "+lab.GatewayPair+" or "+lab.Direct+" (generator straight into the sink)")
	fl.IntVar(&f.tunnels, "tunnels", 1, fmt.Sprintf("tunnels of the temporary lab (1-%d)", lab.MaxTunnels))
	fl.StringVar(&f.profile, "profile", "imix-mno-1", "traffic profile: built-in name ("+strings.Join(bench.ListProfiles(), ", ")+"), fixed-N, or a file")
	fl.IntVar(&f.steps, "steps", 10, "load steps, linear from rate-max/steps to rate-max; with --rate-max auto, the most rising steps of the ramp")
	fl.Float64Var(&f.stepSeconds, "step-seconds", 2, "seconds per step")
	fl.StringVar(&f.rateMax, "rate-max", rateMax, "load of the last step, in pps (2Mpps, 500kpps) or L2 bits per second (10Gbps); "+
		"auto: no top, a ramp from --rate-start, times --rate-factor per step, until the forwarder loses more than --loss-threshold or the generator falls short of its target, then --refine trials between the last rate that passed and the first that failed")
	fl.StringVar(&f.rateStart, "rate-start", "500kpps", "with --rate-max auto: the ramp's first rate")
	fl.Float64Var(&f.rateFactor, "rate-factor", 1.5, "with --rate-max auto: each rising step multiplies the rate by this (1.05 to 10)")
	fl.IntVar(&f.refine, "refine", 4, "with --rate-max auto: trials after the ramp's first failure, bisecting between the last rate that passed and the first that failed (0 to 20)")
	fl.Float64Var(&f.lossThreshold, "loss-threshold", 0, "loss in percent at or below which a step counts as clean")
	fl.StringVar(&f.genCPUs, "gen-cpus", "0", "CPUs the generator's threads run on, comma-separated (each below 8)")
	fl.StringVar(&f.out, "out", "", "report directory (default ./sluice-reports/KIND-YYYYmmdd-HHMMSS)")
	fl.BoolVar(&f.asJSON, "json", false, "print report.json to stdout instead of the summary")
}

func (f *loadFlags) runOptions() (bench.RunOptions, error) {
	var o bench.RunOptions
	prof, err := bench.LoadProfile(f.profile)
	if err != nil {
		return o, err
	}
	rate, auto, err := bench.ParseRateMax("--rate-max", f.rateMax)
	if err != nil {
		return o, usageErrorf("%w", err)
	}
	var ramp *bench.Ramp
	if auto {
		start, err := bench.ParseRate("--rate-start", f.rateStart)
		if err != nil {
			return o, usageErrorf("%w", err)
		}
		ramp = &bench.Ramp{StartPPS: start.PPS(prof), Factor: f.rateFactor, Refine: f.refine}
	}
	if f.labName == "" && (f.tunnels < 1 || f.tunnels > lab.MaxTunnels) {
		return o, usageErrorf("--tunnels %d: use 1 to %d", f.tunnels, lab.MaxTunnels)
	}
	if f.stepSeconds < 0.1 || f.stepSeconds > 3600 {
		return o, usageErrorf("--step-seconds %g: use 0.1 to 3600", f.stepSeconds)
	}
	var cpus []int
	for _, c := range strings.Split(f.genCPUs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil {
			return o, usageErrorf("--gen-cpus %q: write CPU numbers separated by commas, e.g. 0 or 0,1", f.genCPUs)
		}
		cpus = append(cpus, n)
	}
	o = bench.RunOptions{Profile: prof, Steps: f.steps, StepDuration: time.Duration(f.stepSeconds * float64(time.Second)),
		RateMax: rate, Ramp: ramp, LossThreshold: f.lossThreshold, GenCPUs: cpus}
	if err := o.Validate(); err != nil {
		return o, usageErrorf("%w", err) // every check in Validate is about a flag
	}
	return o, nil
}

// newReport starts the report of a KIND run with options o.
func (f *loadFlags) newReport(kind string, o bench.RunOptions) *bench.Report {
	return bench.NewReport(kind, "sluice "+strings.Join(os.Args[1:], " "), benchVersion(), bench.Settings{Profile: o.Profile,
		Steps: o.Steps, StepSeconds: o.StepDuration.Seconds(), RateMax: o.RateMax, Ramp: o.Ramp, LossThreshold: o.LossThreshold, GenCPUs: o.GenCPUs})
}

// stepTotal is the step count the progress lines show: 0 (unknown) for a
// ramp, which stops where the forwarder or the generator does.
func stepTotal(o bench.RunOptions) int {
	if o.Ramp != nil {
		return 0
	}
	return o.Steps
}

// stepOf prints "step 3/10", or "step 3" when the total is unknown.
func stepOf(step, total int) string {
	if total <= 0 {
		return fmt.Sprintf("step %2d", step)
	}
	return fmt.Sprintf("step %2d/%d", step, total)
}

// tempLab builds the lab a run uses when --lab is not given.
func (f *loadFlags) tempLab(progress func(string)) (*lab.Lab, func(), error) {
	if f.labName != "" {
		l, err := lab.Load(f.labName)
		if err != nil {
			return nil, nil, fmt.Errorf("--lab %s: %w", f.labName, err)
		}
		if l.Topology == lab.OverlayPair {
			// The generator writes frames onto a wire; an overlay's
			// traffic must enter through the hosts' stacks.
			return nil, nil, usageErrorf("--lab %s is an overlay-pair: its traffic must start in a host's stack to be encapsulated and encrypted; measure it with 'sluice bench iperf3 --lab %s' and 'sluice bench ping --lab %s'", f.labName, f.labName, f.labName)
		}
		if l.Topology == lab.GatewayModel {
			// Its selectors are 10.0.0.0/8 (the generator's 16/8 would
			// cross the model's wire in cleartext) and the peer sees
			// ESP before its kernel decrypts it (no XDP sink there).
			return nil, nil, usageErrorf("--lab %s is a gateway-model: its one tunnel carries the generator host's own traffic; measure it with 'sluice bench ping --lab %s' and 'sluice bench iperf3 --lab %s', and watch 'sluice lab status %s'", f.labName, f.labName, f.labName, f.labName)
		}
		return l, func() {}, nil
	}
	if f.topology != lab.Forwarder && f.topology != lab.GatewayPair && f.topology != lab.Direct {
		return nil, nil, usageErrorf("--topology %q: use %s, %s or %s (overlay-pair: 'sluice bench iperf3' and 'ping' measure it)", f.topology, lab.Forwarder, lab.GatewayPair, lab.Direct)
	}
	name := "b" + strconv.Itoa(os.Getpid())
	if len(name) > 12 {
		name = name[:12]
	}
	l, err := lab.Up(lab.Spec{Name: name, Topology: f.topology, Tunnels: f.tunnels}, progress)
	if err != nil {
		lab.Down(name)
		return nil, nil, err
	}
	return l, func() {
		if _, err := lab.Down(name); err != nil {
			fmt.Fprintf(os.Stderr, "sluice: removing the temporary lab %s: %v (run 'sluice lab down %s')\n", name, err, name)
		}
	}, nil
}

// isTerminal reports whether w is a terminal (for a live progress line).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// benchTicker draws a live progress line for the running step on a
// terminal; the step's final line overwrites it.
func benchTicker(w io.Writer, label string, total int) func(int, time.Duration, time.Duration) {
	if !isTerminal(w) {
		return nil
	}
	return func(step int, el, d time.Duration) {
		const width = 30
		n := int(float64(width) * el.Seconds() / d.Seconds())
		fmt.Fprintf(w, "\r%-12s %s  [%s%s] %4.1f/%.1f s ", label, stepOf(step, total),
			strings.Repeat("#", n), strings.Repeat(" ", width-n), el.Seconds(), d.Seconds())
	}
}

// benchStepPrinter prints one line per finished step.
func benchStepPrinter(w io.Writer, label string, total int) func(bench.Step) {
	tty := isTerminal(w)
	return func(s bench.Step) {
		if tty {
			fmt.Fprint(w, "\r\033[K")
		}
		mark := either(s.GenLimited, "  (generator below target)", "")
		fmt.Fprintf(w, "%-12s %s  target %-12s tx %-12s rx %-12s loss %7.3f%%  p50 %8.1f µs  p99 %8.1f µs%s\n",
			label, stepOf(s.Index, total), bench.FormatPPS(s.TargetPPS), bench.FormatPPS(s.TxPPS), bench.FormatPPS(s.RxPPS),
			s.LossPct, s.Latency.P50Us, s.Latency.P99Us, mark)
	}
}

func newBenchRunCmd() *cobra.Command {
	var f benchRunFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Stepped load through a lab: throughput, loss and latency per step, with a report",
		Long: `Send a traffic profile through a lab in linear steps (trex-runner style): step i
of N offers i/N of --rate-max for --step-seconds, and every step is measured
exactly: frames sent, received and lost (sent = received + lost), reordering,
and one-way latency (min, mean, p50, p99, p99.9, max).

The generator is an XDP program run with BPF_PROG_RUN in live-frame mode on
the generator's port; every frame carries a stream id, a sequence number and
its send time. The sink is an XDP program on the sink's port that counts and
drops. A step is "clean" when its loss is at most --loss-threshold; the
max-clean step is the clean step with the highest received rate.

With --rate-max auto there is no fixed top: the first step offers
--rate-start and each next one --rate-factor times more, until a step loses
more than --loss-threshold or the generator falls short of its target; then
--refine trials bisect between the last rate that passed and the first that
failed (--steps bounds the rising steps). The summary says what set the
max-clean rate: the forwarder, the generator, or nothing (the load's top).

Without --lab, a temporary lab of --topology is built and removed afterwards.
With --search ndr (zero loss) or pdr (loss at most --loss-threshold, default
0.5%), the steps are an RFC 2544 binary search between 0 and --rate-max
instead (--steps is the number of trials).

The report directory holds report.json (docs/bench.md), steps.csv, the plots
(PNG and SVG) and report.html. Needs root.`,
		Example: `  sluice bench run --profile imix-mno-1 --rate-max 2Mpps --steps 10 --step-seconds 2
  sluice lab up forwarder --name fw --forwarder xdp-redirect
  sluice bench run --lab fw --profile imix-simple --rate-max 20Gbps --out /tmp/r1
  sluice bench run --forwarder sluice --topology gateway-pair --tunnels 1024 --search ndr --rate-max 3Mpps`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchRun(cmd, f) },
	}
	f.load.register(cmd, true, "3Mpps")
	cmd.Flags().StringVar(&f.forwarder, "forwarder", "", "install this forwarder first: "+strings.Join(lab.Forwarders, ", ")+" (default: the lab's)")
	cmd.Flags().StringVar(&f.label, "label", "", "name of the run in the report (default: the forwarder)")
	cmd.Flags().StringVar(&f.search, "search", "", "ndr or pdr: RFC 2544 binary search instead of linear steps")
	return cmd
}

type benchRunFlags struct {
	load                     loadFlags
	forwarder, label, search string
}

func runBenchRun(cmd *cobra.Command, f benchRunFlags) error {
	o, err := f.load.runOptions()
	if err != nil {
		return err
	}
	kind := "run"
	switch f.search {
	case "":
	case "ndr", "pdr":
		kind = f.search
		if f.search == "pdr" && !cmd.Flags().Changed("loss-threshold") {
			o.LossThreshold = 0.5
		}
	default:
		return usageErrorf("--search %q: use ndr (no drop rate) or pdr (partial drop rate, loss <= --loss-threshold)", f.search)
	}
	if kind != "run" && o.Ramp != nil {
		return usageErrorf("--search %s: needs a fixed --rate-max, the top of its binary search (not auto)", kind)
	}
	if f.forwarder != "" && !slices.Contains(lab.Forwarders, f.forwarder) {
		return usageErrorf("--forwarder %q: use one of %s", f.forwarder, strings.Join(lab.Forwarders, ", "))
	}
	log := cmd.ErrOrStderr()
	progress := func(s string) { fmt.Fprintln(log, s) }
	l, cleanup, err := f.load.tempLab(progress)
	if err != nil {
		return err
	}
	defer cleanup()
	if f.forwarder != "" {
		if err := l.SetForwarder(f.forwarder, l.ForwarderOpts, progress); err != nil {
			return err
		}
	}
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	o.Label = f.label
	if o.Label == "" {
		o.Label = l.Forwarder
		if l.Topology == lab.Direct {
			o.Label = "direct"
		}
	}
	total := stepTotal(o)
	o.Progress = benchStepPrinter(log, o.Label, total)
	o.Tick = benchTicker(log, o.Label, total)
	rep := f.load.newReport(kind, o)
	var run *bench.RunResult
	if kind == "run" {
		run, err = bench.Run(ctx, l, o)
	} else {
		rep.Settings.Search = kind
		run, err = bench.Search(ctx, l, o, kind)
	}
	if run != nil {
		rep.Runs = append(rep.Runs, run)
	}
	if err != nil && run == nil {
		return err
	}
	return f.load.finish(cmd, rep, err)
}

// finish writes the report into --out (default ./sluice-reports/KIND-
// YYYYmmdd-HHMMSS), then prints the summary (or the JSON) and where it is.
func (f *loadFlags) finish(cmd *cobra.Command, rep *bench.Report, runErr error) error {
	dir := f.out
	if dir == "" {
		dir = filepath.Join("sluice-reports", rep.Kind+"-"+time.Now().Format("20060102-150405"))
	}
	if err := rep.WriteDir(dir); err != nil {
		return errors.Join(runErr, err)
	}
	if f.asJSON {
		if err := writeJSON(cmd.OutOrStdout(), rep); err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "report: %s\n", filepath.Join(dir, "report.html"))
		return runErr
	}
	w := cmd.OutOrStdout()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	sums := rep.Summaries()
	vs := "VS FIRST"
	if len(sums) > 0 {
		vs = "VS " + strings.ToUpper(sums[0].Label)
	}
	fmt.Fprintf(tw, "RUN\tMAX CLEAN PPS\tMAX CLEAN GBPS\tP99 AT MAX CLEAN\tPEAK RX PPS\t%s\t  LIMIT\n", vs)
	rounds := 1
	for _, s := range sums {
		ratio := "-"
		if s.RatioToFirst > 0 {
			ratio = fmt.Sprintf("%.2fx", s.RatioToFirst)
			if s.Rounds > 1 && s.RatioMax > s.RatioMin {
				ratio = fmt.Sprintf("%.2fx (%.2f-%.2f)", s.RatioToFirst, s.RatioMin, s.RatioMax)
			}
			if s.RatioNote() != "" {
				ratio += "*"
			}
		}
		rounds = max(rounds, s.Rounds)
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.1f µs\t%s\t%s\t  %s\n", s.Label, bench.FormatPPS(s.MaxCleanPPS), s.MaxCleanBPS/1e9,
			s.P99AtClean, bench.FormatPPS(s.PeakRxPPS), ratio, s.LimitText())
	}
	tw.Flush()
	if rounds > 1 {
		fmt.Fprintf(w, "medians of %d rounds; the ratio is the median of the per-round ratios (range in brackets)\n", rounds)
	}
	writeLimits(w, rep, sums)
	abs, _ := filepath.Abs(filepath.Join(dir, "report.html"))
	fmt.Fprintf(w, "report: %s\n", abs)
	return runErr
}

// writeLimits says, per run, what set its max-clean rate, and which
// ratios the generator or the load's top set rather than the forwarders.
func writeLimits(w io.Writer, rep *bench.Report, sums []bench.Summary) {
	for _, s := range sums {
		if note := s.RatioNote(); note != "" {
			fmt.Fprintf(w, "* the ratio %s vs %s was %s: where the generator (or the load's top) set a number, it is not that forwarder's ceiling\n", s.Label, sums[0].Label, note)
		}
	}
	fmt.Fprintln(w, "what set each run's max-clean rate:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, run := range rep.Runs {
		if run.Ceiling == nil {
			continue
		}
		who := run.Label + ":"
		if run.Round > 0 {
			who = fmt.Sprintf("round %d, %s:", run.Round, run.Forwarder)
		}
		fmt.Fprintf(tw, "  %s\t%s\n", who, run.Ceiling.Text)
	}
	tw.Flush()
}

func benchVersion() string {
	if commit != "" {
		return version + " (" + commit + ")"
	}
	return version
}
