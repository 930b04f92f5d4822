// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"sluice/internal/bench"
	"sluice/internal/lab"
)

// benchEndpoints resolves --lab or --target for iperf3 and ping.
func benchEndpoints(labName, target string) (bench.Endpoints, error) {
	switch {
	case labName != "" && target != "":
		return bench.Endpoints{}, usageErrorf("--lab and --target: give one (--lab runs both ends in the lab, --target measures towards a host from here)")
	case labName != "":
		l, err := lab.Load(labName)
		if err != nil {
			return bench.Endpoints{}, fmt.Errorf("--lab %s: %w", labName, err)
		}
		e := l.Ends()
		return bench.Endpoints{Target: e.Target.String(), ClientNS: e.GenNS, ServerNS: e.SinkNS}, nil
	case target != "":
		return bench.Endpoints{Target: target}, nil
	}
	return bench.Endpoints{}, usageErrorf("--lab or --target: say where to measure (a lab from 'sluice lab up', or a host running 'iperf3 -s')")
}

func newBenchIperf3Cmd() *cobra.Command {
	var f benchIperf3Flags
	cmd := &cobra.Command{
		Use:   "iperf3",
		Short: "Throughput as mean ± sample standard deviation over repeated iperf3 runs",
		Long: `Measure TCP throughput the way the ConnectX-6 SR-IOV guide does: one warm-up run, then --runs runs
of 'iperf3 --bidi --parallel P --json'. Each run gives two values, the rate
each side received; the result is their mean and *sample* standard deviation
(n - 1) over all 2 x runs values. --direction forward or reverse measures one
direction (runs values); the VM single-flow guide's method is one direction, one flow, 60 s:
--direction forward --parallel 1 --time 60.

With --lab, the server runs in the lab's sink namespace (on 11.0.0.1) and the
client in its generator namespace, so the traffic crosses the lab's
forwarder. With --target, the client runs here against a host where
'iperf3 -s' runs.`,
		Example: `  sluice bench iperf3 --lab lab --runs 10 --parallel 2
  sluice bench iperf3 --target 192.168.90.3 --runs 10 --parallel 2 --time 10 --json
  sluice bench iperf3 --lab lab --direction forward --parallel 1 --time 60   # the VM single-flow guide`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchIperf3(cmd, f) },
	}
	cmd.Flags().StringVar(&f.labName, "lab", "", "measure across this lab (client in gen, server in sink)")
	cmd.Flags().StringVar(&f.target, "target", "", "measure from here towards this host (running iperf3 -s)")
	cmd.Flags().IntVar(&f.o.Runs, "runs", 10, "measured runs after the warm-up")
	cmd.Flags().IntVar(&f.o.Parallel, "parallel", 2, "iperf3 --parallel streams")
	cmd.Flags().IntVar(&f.o.Seconds, "time", 10, "seconds per run (the duration; the VM single-flow guide uses 60)")
	cmd.Flags().StringVar(&f.o.Direction, "direction", bench.DirBidi, "forward (client to server), reverse (server to client) or bidi (both at once)")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
	return cmd
}

type benchIperf3Flags struct {
	o               bench.IperfOptions
	labName, target string
	asJSON          bool
}

func runBenchIperf3(cmd *cobra.Command, f benchIperf3Flags) error {
	ep, err := benchEndpoints(f.labName, f.target)
	if err != nil {
		return err
	}
	f.o.Endpoints = ep
	if !f.asJSON {
		f.o.Progress = func(i int, r bench.IperfRun) {
			what := fmt.Sprintf("run %d/%d", i, f.o.Runs)
			if i == 0 {
				what = "warm-up"
			}
			fw, rv := fmt.Sprintf(" forward %8.3f Gbit/s", r.ForwardBPS/1e9), fmt.Sprintf(" reverse %8.3f Gbit/s", r.ReverseBPS/1e9)
			line := map[string]string{bench.DirForward: fw, bench.DirReverse: rv}[f.o.Direction]
			fmt.Fprintf(cmd.ErrOrStderr(), "%-10s%s\n", what, cmp.Or(line, fw+" "+rv))
		}
	}
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	res, err := bench.RunIperf3(ctx, f.o)
	if err != nil {
		return err
	}
	return emit(cmd.OutOrStdout(), f.asJSON, res, func() {
		per := either(res.Direction != bench.DirBidi, res.Direction+" only", "2 directions")
		fmt.Fprintf(cmd.OutOrStdout(), "%.3g ± %.2g Gbit/s (mean ± sample std dev of %d values: %d runs, %s; %s)\n",
			res.MeanBPS/1e9, res.StdDevBPS/1e9, res.N, len(res.Runs), per, res.Command)
	})
}

func newBenchPingCmd() *cobra.Command {
	var f benchPingFlags
	cmd := &cobra.Command{
		Use:   "ping",
		Short: "Round-trip time as mean ± population standard deviation of a flood ping",
		Long: `Measure latency the way the ConnectX-6 SR-IOV guide does: a flood ping (ping -f -c COUNT) to warm
up the path, then a second one whose mean and *population* standard deviation
(ping's mdev) are reported. Flood ping needs root.

With --lab, the ping runs from the lab's generator namespace to the sink
(11.0.0.1) across the lab's forwarder; with --target, from here.`,
		Example: `  sluice bench ping --lab lab
  sluice bench ping --target 192.168.90.3 --count 10000 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchPing(cmd, f) },
	}
	cmd.Flags().StringVar(&f.labName, "lab", "", "measure across this lab (from gen to sink)")
	cmd.Flags().StringVar(&f.target, "target", "", "measure from here towards this host")
	cmd.Flags().IntVar(&f.o.Count, "count", 10000, "echo requests per flood ping")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
	return cmd
}

type benchPingFlags struct {
	o               bench.PingOptions
	labName, target string
	asJSON          bool
}

func runBenchPing(cmd *cobra.Command, f benchPingFlags) error {
	ep, err := benchEndpoints(f.labName, f.target)
	if err != nil {
		return err
	}
	f.o.Endpoints = ep
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	res, err := bench.RunPing(ctx, f.o)
	if err != nil {
		return err
	}
	r := res.Run
	return emit(cmd.OutOrStdout(), f.asJSON, res, func() {
		fmt.Fprintf(cmd.OutOrStdout(), "%.1f ± %.1f µs round trip (mean ± population std dev of %d replies to %d; min %.1f, max %.1f µs; after a warm-up of %d; %s)\n",
			r.MeanUs, r.StdDevUs, r.Received, r.Sent, r.MinUs, r.MaxUs, res.Warmup.Sent, res.Command)
	})
}

func newBenchTRexProfileCmd() *cobra.Command {
	var f benchTRexProfileFlags
	cmd := &cobra.Command{
		Use:   "trex-profile PROFILE",
		Short: "Write a sluice traffic profile as a TRex STL Python profile",
		Long: `Write PROFILE (a built-in name, fixed-N or a file) as a TRex STL profile, so a
hardware lab sends the same frame sizes, mix and flows with TRex (and
trex-runner's stepped multiplier) as 'sluice bench run' does on veth.

Frame sizes are written without FCS, as TRex builds them (its NIC appends the
FCS). Each stream's rate is its weight in pps (the MNO tables then run at their
measured rates at -m 1), or its share of --pps. Destinations walk the tunnels'
subnets 48.x.y.0/24 of the BlueField-3 benchmark's address plan.`,
		Example: `  sluice bench trex-profile imix-mno-1 --tunnels 50 -o imix-mno-1.py
  sluice bench trex-profile imix-simple --pps 1Mpps`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runBenchTRexProfile(cmd, f, args) },
	}
	cmd.Flags().IntVar(&f.o.Tunnels, "tunnels", 1, "tunnel subnets the destinations spread over")
	cmd.Flags().StringVar(&f.pps, "pps", "", "total rate at multiplier 1 (default: each stream's weight as pps)")
	cmd.Flags().StringVarP(&f.out, "output", "o", "", "file to write (default: stdout)")
	return cmd
}

type benchTRexProfileFlags struct {
	o        bench.TRexOptions
	out, pps string
}

func runBenchTRexProfile(cmd *cobra.Command, f benchTRexProfileFlags, args []string) error {
	p, err := bench.LoadProfile(args[0])
	if err != nil {
		return err
	}
	if f.o.Tunnels < 1 || f.o.Tunnels > lab.MaxTunnels {
		return usageErrorf("--tunnels %d: use 1 to %d", f.o.Tunnels, lab.MaxTunnels)
	}
	if f.pps != "" {
		r, err := bench.ParseRate("--pps", f.pps)
		if err != nil {
			return err
		}
		f.o.TotalPPS = r.PPS(p)
	}
	b, err := bench.TRexProfile(p, f.o)
	if err != nil {
		return err
	}
	if f.out == "" || f.out == "-" {
		_, err = cmd.OutOrStdout().Write(b)
		return err
	}
	if err := os.WriteFile(f.out, b, 0o644); err != nil {
		return err
	}
	abs, _ := filepath.Abs(f.out)
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", abs)
	return nil
}
