// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"sluice/internal/bench"
)

func newBenchRekeyCmd() *cobra.Command {
	var f benchRekeyFlags
	cmd := &cobra.Command{
		Use:   "rekey --ns-a A --ns-b B --to ADDR --vici-a URI --vici-b URI",
		Short: "Count datagrams lost, duplicated or reordered across forced IKE rekeys",
		Long: `Send constant-rate, sequence-numbered UDP from overlay host A (network
namespace --ns-a) to B's overlay address (--to, in --ns-b) while the IKE
CHILD_SAs between them are rekeyed --rekeys times, one every --interval,
and count per rekey the datagrams lost, duplicated and reordered (each
rekey owns the datagrams sent in the interval centred on it).

Both hosts run charon (--vici-a, --vici-b) with the overlay up (sluice
apply with keying: ike). Modes:
  child     A rekeys the CHILD_SA (swanctl --rekey --child)
  collide   A and B rekey at the same instant: the exchanges cross
  reauth    A reauthenticates the IKE_SA (rebuilds the CHILD_SAs;
            break-before-make unless charon.make_before_break = yes)
  lifetime  nothing forced: the connection's short rekey-time rekeys it
--ike-delay D --ike-dev DEV delays A's IKE packets on DEV with netem
(the VM's kernel has sch_netem), so collisions are certain.

Prints the per-rekey table; --out DIR also writes rekey.json, rekey.txt,
the chart (rekey.svg, rekey.png) and report.html. Measured figures and commands: docs/benchmarks.md.`,
		Example: `  sluice bench rekey --ns-a ike-a --ns-b ike-b --to 192.168.90.2 \
    --vici-a unix:///run/a/charon.vici --vici-b unix:///run/b/charon.vici --rekeys 100 --mode collide \
    --ike-delay 100ms --ike-dev bond0 --out rekey-report`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchRekey(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.o.NSA, "ns-a", "", "network namespace of sender A (default: this one)")
	fl.StringVar(&f.o.NSB, "ns-b", "", "network namespace of receiver B (default: this one)")
	fl.StringVar(&f.to, "to", "", "B's overlay address (required)")
	fl.IntVar(&f.o.Port, "port", 9999, "UDP port the receiver listens on")
	fl.StringVar(&f.o.ViciA, "vici-a", "unix:///var/run/charon.vici", "A's charon VICI socket")
	fl.StringVar(&f.o.ViciB, "vici-b", "unix:///var/run/charon.vici", "B's charon VICI socket")
	fl.StringVar(&f.o.ConnA, "conn-a", "", "A's IKE connection (default: the only sluice- connection)")
	fl.StringVar(&f.o.ConnB, "conn-b", "", "B's IKE connection (default: the only sluice- connection)")
	fl.IntVar(&f.o.Rekeys, "rekeys", 10, "number of rekeys")
	fl.DurationVar(&f.o.Interval, "interval", 0, "time between rekeys (default 3s)")
	fl.IntVar(&f.o.Rate, "rate", 0, "datagrams per second (default 1000)")
	fl.StringVar(&f.o.Mode, "mode", bench.RekeyChild, "child, collide, reauth, ike or lifetime")
	fl.DurationVar(&f.o.IKEDelay, "ike-delay", 0, "netem delay on A's IKE packets (0: none)")
	fl.StringVar(&f.o.IKEDev, "ike-dev", "", "A's underlay device for --ike-delay")
	fl.StringVar(&f.o.Label, "label", "", "name of the configuration measured (for the report)")
	fl.StringVar(&f.outDir, "out", "", "also write the report (JSON, table, chart, HTML) into this directory")
	fl.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	return exits(cmd, ExitCheckFailed, "a datagram was lost")
}

type benchRekeyFlags struct {
	o          bench.RekeyOptions
	to, outDir string
	asJSON     bool
}

func runBenchRekey(cmd *cobra.Command, f benchRekeyFlags) error {
	a, err := netip.ParseAddr(f.to)
	if err != nil {
		return fmt.Errorf("--to %q: want B's overlay address, such as 192.168.90.2", f.to)
	}
	f.o.To = a
	rep, err := bench.RunRekey(cmd.Context(), f.o)
	if err != nil {
		return err
	}
	rep.Command = "sluice " + strings.Join(os.Args[1:], " ")
	w := cmd.OutOrStdout()
	if err := emit(w, f.asJSON, rep, func() { rep.WriteTable(w) }); err != nil {
		return err
	}
	if f.outDir != "" {
		if err := rep.WriteDir(f.outDir); err != nil {
			return err
		}
	}
	if rep.Total.Lost > 0 {
		return checkFailed(fmt.Errorf("%d datagram(s) lost over %d rekeys", rep.Total.Lost, len(rep.Events)))
	}
	return nil
}
