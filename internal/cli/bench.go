// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"sluice/internal/bench"
)

func newBenchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "bench",
		Short: "Measure the fast path and lab traffic",
	}
}

func newBenchFastpathCmd() *cobra.Command {
	var f benchFastpathFlags
	cmd := &cobra.Command{
		Use:   "fastpath",
		Short: "Per-packet cost of the XDP program at several policy counts (BPF_PROG_RUN)",
		Long: `Measure the fast path's cost per packet with BPF_PROG_RUN at each tunnel
count, for these cases (--cases picks some):

  outbound-match  an outbound packet of a tunnel, forwarded from the flow cache
  outbound-match-sa-mirror
                  the same with the gateway's SA check: the mirror's name of
                  the tunnel's SA must still be there (the SA-deletion window)
  outbound-match-sa-kernel
                  the same, and the kernel must still hold the SA
                  (bpf_xdp_get_xfrm_state each forward; an SPI reserved in the
                  scratch namespace stands for the SA)
  first-packet    the same packet with the flow cache off: the full decision,
                  the FIB's answer reused (a destination seen before)
  first-packet-new-dst
                  the same with the FIB result cache off too: every run asks
                  the FIB (a first packet to a destination not seen before)
  inbound-match   decrypted traffic from a tunnel: passed to the kernel
  esp             ESP from a tunnel peer to the gateway: passed
  no-match        cleartext no policy covers: passed

A tunnel is what strongSwan installs: one OUT, one IN and one FWD policy and
two packet-offloaded SAs. The VERDICT column is the live program's action and
reason; a pass decided before the exact checks (nothing forwardable covers
the destination; with --counters, no policy at all) is counted as
not-forwardable.

The program runs in a scratch network namespace whose routes make its FIB
lookups succeed, as on a gateway. This measures the program alone, on this
CPU; it says nothing about NIC throughput. Needs root.

BPF_PROG_RUN reruns the program on the same buffer, and a forward decrements
its TTL: the outbound packet starts at TTL 255 and runs in batches of 250,
at most 25,000 runs in all (each batch costs the kernel two RCU grace
periods). Every run's verdict is checked through the reason counters: a
measurement of another path than the one named is an error.

--stages adds, after outbound-match, what each step of that cached forward
costs: the programs of bpf/stage_probe.c run the fast path's own stage
functions up to one step each (BPF_PROG_RUN itself, config and lease, parse,
the flow-cache lookup, the size/MAC/SA checks, the rewrite, the redirect),
loaded over the live program's maps, and run interleaved with the live
program, batch by batch; +NS is what a step adds to the one before.`,
		Example: "  sluice bench fastpath --tunnels 1,1024,8192,65536 --json",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runBenchFastpath(cmd, f) },
	}
	cmd.Flags().StringVar(&f.tunnels, "tunnels", "1,1024,8192,65536", "comma-separated tunnel counts")
	cmd.Flags().StringVar(&f.tunnels, "policies", "1,1024,8192,65536", "alias of --tunnels")
	cmd.Flags().IntVar(&f.repeat, "repeat", 1000000, "BPF_PROG_RUN runs per measurement (a forward: at most 25,000)")
	cmd.Flags().StringVar(&f.cases, "cases", "", "comma-separated cases to measure (default: all)")
	cmd.Flags().BoolVar(&f.counters, "counters", false, "per-policy counters on (a gateway's default): passes a policy covers then take the full decision")
	cmd.Flags().StringVar(&f.peer, "peer", "", "also measure this XDP object, built from fastSwan's src/bpf/xfrm_offload.c, on the same policies and frames")
	cmd.Flags().BoolVar(&f.stages, "stages", false, "after outbound-match, the cost of each step of the cached forward (bpf/stage_probe.c)")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
	return cmd
}

type benchFastpathFlags struct {
	peer, tunnels, cases     string
	repeat                   int
	counters, stages, asJSON bool
}

func runBenchFastpath(cmd *cobra.Command, f benchFastpathFlags) error {
	var counts []int
	for _, f := range strings.Split(f.tunnels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 65536 {
			return usageErrorf("--tunnels: %q is not a count between 1 and 65536", f)
		}
		counts = append(counts, n)
	}
	if f.repeat < 1 {
		return usageErrorf("--repeat %d: run the program at least once", f.repeat)
	}
	var cases []string
	if f.cases != "" {
		for _, c := range strings.Split(f.cases, ",") {
			c = strings.TrimSpace(c)
			if !slices.Contains(bench.FastpathCases(), c) {
				return usageErrorf("--cases: %q is not a case; the cases are %s", c, strings.Join(bench.FastpathCases(), ", "))
			}
			cases = append(cases, c)
		}
	}
	res, err := bench.Fastpath(counts, f.repeat, bench.FastpathOptions{Cases: cases, Counters: f.counters, Peer: f.peer, Stages: f.stages})
	if err != nil {
		return err
	}
	if f.asJSON {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	rows, stages := splitStages(res)
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROGRAM\tTUNNELS\tPOLICIES\tCASE\tNS/PACKET\tRUNS\tVERDICT")
	for _, r := range rows {
		verdict := r.Action
		if r.Reason != "" {
			verdict += "/" + r.Reason
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%.1f\t%d\t%s\n", r.Program, r.Tunnels, r.Policies, r.Case, r.NsPerPacket, r.Runs, verdict)
	}
	if err := tw.Flush(); err != nil || len(stages) == 0 {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), "\nThe cached forward (outbound-match), step by step:")
	tw = tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TUNNELS\tPROGRAM\tNS/PACKET\t+NS\tSTEP")
	before := map[int]float64{} // by tunnels: the previous row's; stage_rewrite's for the live program
	rewrite := map[int]float64{}
	for _, r := range stages {
		base := before[r.Tunnels]
		if r.Program == bench.StageLive {
			base = rewrite[r.Tunnels]
		}
		fmt.Fprintf(tw, "%d\t%s\t%.1f\t%+.1f\t%s\n", r.Tunnels, r.Program, r.NsPerPacket, r.NsPerPacket-base, bench.StageStep(r.Program))
		before[r.Tunnels] = r.NsPerPacket
		if r.Program == "stage_rewrite" {
			rewrite[r.Tunnels] = r.NsPerPacket
		}
	}
	return tw.Flush()
}

// splitStages separates --stages' rows (the stage probe's programs and the
// live program beside them) from the cases'.
func splitStages(res []bench.FastpathResult) (cases, stages []bench.FastpathResult) {
	for _, r := range res {
		if r.Program == "sluice" || r.Program == "peer" {
			cases = append(cases, r)
		} else {
			stages = append(stages, r)
		}
	}
	return cases, stages
}
