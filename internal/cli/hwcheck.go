// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"sluice/internal/config"
	"sluice/internal/hwcheck"
)

func newHWCheckCmd() *cobra.Command {
	var f hwcheckFlags
	cmd := &cobra.Command{
		Use:   "hwcheck --port PORT --peer PEER",
		Short: "Hardware acceptance: run the NIC model's driver scenarios on a real port pair and compare",
		Long: `Run the scenarios the NIC model's driver profiles stand for on a real port pair
cabled back to back on this host, measure each on the wire, and compare it with
what sluice assumes of the driver: the driver table's rows for the port's driver
and this kernel, or a model profile (--profile). Each row prints the behaviour,
what the profile expects, what the port did, and "model = hardware", "differs",
"inconclusive" (it ran and proved nothing) or "not run" with what it needs.

Scenarios (issue 31; docs/testing.md, "A hardware acceptance run"):
  subnet-selector       an offloaded /16 tunnel policy; datagrams between hosts
                        of the subnets: ESP, or cleartext (exact selector match)
  sa-deleted-under-xdp  frames XDP-redirected into the port, the SA deleted
                        under its policy: dropped, or cleartext (no TX miss rule)
  xdp-xmit-encrypted    do frames XDP redirects into the port (ndo_xdp_xmit)
                        meet the IPsec tables at all
  non-esn-replay        an ESP frame sent twice more to a non-ESN inbound SA:
                        dropped, or delivered (no anti-replay without ESN)
  carried-oseq          an SA added with oseq 4096, ESN off: its first sequence
                        number on the wire, 1 or 4097
  bond-failover         not run: needs a bond of two ports on each end

The two ports move into two network namespaces the run creates (PORT in one,
PEER in the other) and come back, with their up/down state, when it ends,
also on an error or Ctrl-C; everything it installs (SAs and policies with
random keys that are never printed, XDP programs, a veth) lives in those
namespaces. If the run is killed with SIGKILL the kernel returns the ports to
the initial namespace, down. The ports must carry no address and belong to
no bond or bridge. PEER never holds an offloaded SA in a transmit scenario, so
a capture on it (AF_PACKET) sees the frames as they crossed the cable; PORT
needs IPsec packet offload and native XDP. Needs root.`,
		Example: `  sluice hwcheck --port enp65s0f0np0 --peer enp65s0f1np1
  sluice hwcheck --port enp65s0f0np0 --peer enp65s0f1np1 --profile mlx5-6.12 --json
  sluice hwcheck --port eth2 --peer eth3 --only subnet-selector --only carried-oseq`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			return runHWCheck(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.port, "port", "", "the port under test (it gets the packet-offload SAs and XDP)")
	fl.StringVar(&f.peer, "peer", "", "the port cabled to it (it captures, and sends the replay)")
	fl.StringVar(&f.profile, "profile", "", "compare with this NIC model profile (mlx5-6.12, mlx5-upstream) instead of the driver table's rows for the port's driver and kernel")
	fl.IntVar(&f.frames, "frames", 5, "frames each measurement sends")
	fl.StringSliceVar(&f.only, "only", nil, "run only these scenarios (repeat or comma-separate): "+strings.Join(hwcheck.Scenarios(), ", "))
	fl.BoolVar(&f.asJSON, "json", false, "print a JSON object")
	_ = cmd.MarkFlagRequired("port")
	_ = cmd.MarkFlagRequired("peer")
	return exits(cmd, ExitCheckFailed, `a row differs from the profile, or was inconclusive`)
}

type hwcheckFlags struct {
	port, peer, profile string
	frames              int
	only                []string
	asJSON              bool
}

func runHWCheck(ctx context.Context, w, progress io.Writer, f hwcheckFlags) error {
	for _, p := range [][2]string{{"--port", f.port}, {"--peer", f.peer}} {
		if problem := config.InterfaceNameProblem(p[1]); problem != "" {
			return usageErrorf("%s: %s", p[0], problem)
		}
	}
	if f.frames < 2 || f.frames > 1000 {
		return usageErrorf("--frames %d: want 2 to 1000", f.frames)
	}
	if _, err := hwcheck.Expectations(f.profile, "", ""); err != nil {
		return usageErrorf("%v", err)
	}
	rep, err := hwcheck.Run(ctx, hwcheck.Options{Port: f.port, Peer: f.peer, Profile: f.profile,
		Frames: f.frames, Only: f.only, Log: progress})
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("hwcheck: interrupted; %s and %s are back in this namespace", f.port, f.peer)
	}
	if err != nil {
		return fmt.Errorf("hwcheck: %w", err)
	}
	if err := emit(w, f.asJSON, rep, func() { renderHWCheck(w, rep) }); err != nil {
		return err
	}
	if rep.Failed() {
		var bad []string
		for _, r := range rep.Rows {
			if r.Failed() {
				bad = append(bad, r.Scenario+" "+string(r.Verdict))
			}
		}
		return checkFailed(fmt.Errorf("hwcheck: %s", strings.Join(bad, ", ")))
	}
	return nil
}

func renderHWCheck(w io.Writer, rep hwcheck.Report) {
	fmt.Fprintf(w, "port %s (%s) -> peer %s, kernel %s\nexpected: %s\n\n", rep.Port, rep.Driver, rep.Peer, rep.Kernel, rep.ExpectedFrom)
	counts := map[hwcheck.Verdict]int{}
	for _, r := range rep.Rows {
		counts[r.Verdict]++
		verdict := string(r.Verdict)
		if r.Why != "" {
			verdict += ": " + r.Why
		}
		fmt.Fprintf(w, "%-22s %s\n", r.Scenario, verdict)
		fmt.Fprintf(w, "  behaviour: %s\n  expected:  %s\n", r.Behaviour, r.Expected)
		if r.Measured != "" {
			fmt.Fprintf(w, "  measured:  %s\n", r.Measured)
		}
		if r.Evidence != "" {
			fmt.Fprintf(w, "  wire:      %s\n", r.Evidence)
		}
	}
	fmt.Fprintf(w, "\n%d rows: %d model = hardware, %d differ, %d inconclusive, %d not run\n", len(rep.Rows),
		counts[hwcheck.Same], counts[hwcheck.Differs], counts[hwcheck.Inconclusive], counts[hwcheck.NotRun])
}
