// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"sluice/internal/diag"
	"sluice/internal/tune"
)

const tuneLong = `A tuning profile (tune.yaml) is the ConnectX-7 benchmark's host script as data:

  sysctls:                      # sysctl -w, checked and applied
    net.ipv4.ip_forward: 1
    net.core.busy_poll: 50
    net.core.netdev_budget: 600
  thp: never                    # transparent_hugepage enabled and defrag
  daemon-cpus: 2-3              # housekeeping CPUs for the gateway daemon
                                # (checked against rx cpus and isolcpus)
  cmdline:                      # kernel command line: checked, never edited
    isolcpus: managed_irq,domain,4-23
    nohz_full: 4-23
    irqaffinity: 0-3
  interfaces:
    p0:
      rx-queues: 10             # ethtool -L p0 combined 10
      cpus: 4-13                # rx queue i's IRQ pinned to the i-th CPU
      rss-equal: 10             # ethtool -X p0 equal 10
      rings: {rx: 8192, tx: 8192}
      coalesce: {adaptive-rx: false, adaptive-tx: false, rx-usecs: 8, rx-frames: 64, tx-usecs: 8}
      features: {gro: false, lro: false, gso: false, tso: false, hw-tc-offload: true, ntuple: true}
      private-flags: {rx_striding_rq: true, rx_cqe_compress: true}
      flow-control: {rx: false, tx: false}   # ethtool -A p0 rx off tx off
      pcie-max-read-req: 2048   # setpci CAP_EXP+8.w, bits 14:12

See docs/tune.md.`

func newTuneCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "tune",
		Short: "Plan, apply and check a host tuning profile (IRQ pinning, rings, sysctls, ...)",
		Long:  "Keep a host tuned as a declarative profile says.\n\n" + tuneLong,
		Example: `  sluice tune plan -f tune.yaml     # the commands apply would run
  sluice tune apply -f tune.yaml    # change what differs, nothing else
  sluice tune check -f tune.yaml    # every drift, live vs wanted; exit 3 on drift`,
		Args: cobra.NoArgs,
	}
}

type tuneReport struct {
	Changed []tune.Item `json:"changed,omitempty"`
	Drift   []tune.Item `json:"drift"`
	Items   []tune.Item `json:"items,omitempty"`
	// NotApplicable are the settings this host cannot have, with why.
	NotApplicable []tune.Item `json:"not_applicable,omitempty"`
}

func newTuneSub(verb string) *cobra.Command {
	f := tuneFlags{verb: verb}
	short := map[string]string{
		"plan":  "Print the commands that would bring the host to the profile (changes nothing)",
		"apply": "Change what differs from the profile, then check again",
		"check": "Report every setting that differs from the profile, live vs wanted",
	}[verb]
	cmd := &cobra.Command{
		Use:   verb + " -f tune.yaml",
		Short: short,
		Long: short + `.

plan prints one command per difference (ethtool, sysctl, echo > /proc/irq/N/
smp_affinity_list, setpci), kernel command line items as comments. apply
changes only the settings that differ (so a second apply changes nothing),
channels before the IRQs they create, and never the kernel command line.
check prints "[DRIFT] key: live X, want Y" per difference ("[CHECK]" for
command line items, which need a reboot) and exits 3 when there is any.

Settings a device cannot have (the driver lacks the ethtool operation, as
veth lacks ethtool -g; a feature that is [fixed] or absent; a private flag
the driver does not know) are reported as "[N/A] key: reason" and never
proposed or applied; the rest of the profile goes on.

With --sysroot the profile is checked against a captured tree: sysctls, THP,
command line and IRQ affinity only; ethtool and setpci items are reported
as not applicable, with the reason.

` + tuneLong,
		Example: "  sluice tune " + verb + " -f /etc/sluice/tune.yaml",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runTune(cmd, f) },
	}
	cmd.Flags().StringVarP(&f.file, "file", "f", "", "tuning profile (YAML)")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print a JSON object")
	cmd.Flags().StringVar(&f.root, "sysroot", "/", "act on sys/ and proc/ under this directory (no ethtool)")
	if verb == "check" {
		return exits(cmd, ExitCheckFailed, "a setting differs from the profile")
	}
	return cmd
}

type tuneFlags struct {
	verb       string // plan, apply or check
	file, root string
	asJSON     bool
}

func runTune(cmd *cobra.Command, f tuneFlags) error {
	if f.file == "" {
		return usageErrorf("tune %s: -f tune.yaml is required (see sluice tune --help for the format)", f.verb)
	}
	p, err := tune.Load(f.file)
	if err != nil {
		return err
	}
	h := &tune.Host{FS: diag.FS{Root: f.root}, NoEthtool: f.root != "/" && f.root != ""}
	w := cmd.OutOrStdout()
	var rep tuneReport
	switch f.verb {
	case "apply":
		changed, remaining, aerr := h.Apply(p)
		rep.Changed, rep.Drift = changed, append([]tune.Item{}, remaining...) // [] rather than null in --json
		if err := emit(w, f.asJSON, rep, func() {
			for _, it := range changed {
				fmt.Fprintf(w, "[APPLIED] %s: %s -> %s (%s)\n", it.Key, it.Live, it.Want, it.Command)
			}
			if len(changed) == 0 {
				fmt.Fprintln(w, "nothing to change")
			}
			renderDrift(w, remaining)
		}); err != nil {
			return err
		}
		if aerr != nil {
			return aerr
		}
		if slices.ContainsFunc(remaining, func(it tune.Item) bool { return !it.ReportOnly }) {
			return fmt.Errorf("tune apply: %d setting(s) still differ", len(remaining))
		}
		return nil
	default:
		items, err := h.Collect(p)
		if err != nil {
			return err
		}
		rep.Drift = append([]tune.Item{}, tune.Drift(items)...)
		rep.NotApplicable = tune.NotApplicable(items)
		if f.verb == "check" {
			rep.Items = items
		}
		if err := emit(w, f.asJSON, rep, func() {
			if f.verb == "plan" {
				renderLayout(w, p)
				renderTunePlan(w, items)
				if len(rep.Drift) == 0 {
					fmt.Fprintln(w, "# nothing to change")
				}
				return
			}
			renderDrift(w, rep.Drift)
			renderNotApplicable(w, items, "")
			fmt.Fprintf(w, "%d setting(s) checked, %d drift, %d not applicable\n", len(items), len(rep.Drift), len(tune.NotApplicable(items)))
		}); err != nil {
			return err
		}
		if f.verb == "check" && len(rep.Drift) > 0 {
			return checkFailed(fmt.Errorf("tune check: %d setting(s) differ from %s", len(rep.Drift), f.file))
		}
		return nil
	}
}
