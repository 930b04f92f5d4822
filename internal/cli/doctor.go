package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"sluice/internal/diag"
	"sluice/internal/fileread"
)

func init() { register(newDoctorCmd) }

func newDoctorCmd() *cobra.Command {
	var (
		asJSON            bool
		noProbe           bool
		factsIn, factsOut string
		hostFile          string
		opts              diag.DoctorOptions
	)
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the host for what breaks or slows IPsec offload, and say why and how to fix it",
		Long: `Run checks over the host's kernel, interfaces, bonds, devlink devices, XFRM
state, tc rules and NIC firmware. Each result has a verdict ([ OK ], [INFO],
[WARN], [FAIL], [SKIP] when it cannot be checked here), the evidence it rests
on, and the fix.

Checks (select some with --check):
  kernel-features  XFRM, ESP and rfc4106(gcm(aes)) work (tried in a throwaway namespace)
  esp-offload      esp-hw-offload and tx-esp-segmentation per hardware port
  bond-offload     a bond claiming ESP offload that a slave lacks, and slaves
                   offloading behind a bond that does not
  offload-probe    installs a crypto- and a packet-offload SA on each port with
                   esp-hw-offload on (documentation addresses, no policy), then
                   removes them; skip with --no-probe
  mlx5-tc-order    tc rules offloaded before IPsec packet offload (mlx5 allows one)
  mlx5-steering    flow_steering_mode and eswitch mode (--eswitch: the mode the
                   configuration needs)
  mtu-headroom     VXLAN/Geneve MTU + encapsulation + ESP within the underlay MTU
  sa-per-peer      one SA per peer pins its traffic to one RX queue: per-CPU SAs
                   (RFC 9611, strongSwan 6.0.2+, Linux 6.13+)
  sa-budget        offloaded SAs per NIC SA table against the driver's known
                   limit (ixgbe/x540: 1024 Rx + 1024 Tx shared by the PF and
                   its VFs; netdevsim: 33 per port); --host adds a host.yaml's
  bond-port-offload SAs offloaded to one port of an active-backup bond: the
                   bond does not move them at failover
  firmware         SRIOV_EN, NUM_OF_VFS, LAG_RESOURCE_ALLOCATION,
                   FLEX_PARSER_PROFILE_ENABLE, HAIRPIN_DATA_BUFFER_LOCK via
                   mstconfig or mlxconfig, when installed
  xdp-mode         XDP programs in generic instead of native mode

The host is read once; --save-facts writes what was read to a file, and
--facts diagnoses such a file (from another host) instead of this one.
Exits 3 when a check fails, 0 otherwise. Needs root for the probes.`,
		Example: `  sluice doctor
  sluice doctor --check bond-offload --check esp-offload
  sluice doctor --eswitch switchdev --json
  sluice doctor --host /etc/sluice/host.yaml --check sa-budget
  sluice doctor --save-facts gw1.json   # then, elsewhere: sluice doctor --facts gw1.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.WantEswitch != "" && opts.WantEswitch != "legacy" && opts.WantEswitch != "switchdev" {
				return usageErrorf("--eswitch %q: want legacy or switchdev", opts.WantEswitch)
			}
			if hostFile != "" {
				planned, err := plannedSAs(hostFile)
				if err != nil {
					return err
				}
				opts.PlannedSAs = planned
			}
			var facts *diag.Facts
			if factsIn != "" {
				b, err := fileread.Read(factsIn, fileread.StateLimit)
				if err != nil {
					return fmt.Errorf("--facts: %w", err)
				}
				facts = &diag.Facts{}
				if err := json.Unmarshal(b, facts); err != nil {
					return fmt.Errorf("--facts %s: %w (write one with sluice doctor --save-facts)", factsIn, err)
				}
			} else {
				facts = diag.Gather(diag.GatherOptions{FS: diag.Host, NoProbe: noProbe})
			}
			if factsOut != "" {
				b, err := json.MarshalIndent(facts, "", "  ")
				if err != nil {
					return err
				}
				if err := os.WriteFile(factsOut, append(b, '\n'), 0o644); err != nil {
					return fmt.Errorf("--save-facts: %w", err)
				}
			}
			rep, err := diag.Diagnose(facts, opts)
			if err != nil {
				return fmt.Errorf("--check: %w", err)
			}
			if asJSON {
				if err := writeIndentedJSON(cmd.OutOrStdout(), rep); err != nil {
					return err
				}
			} else {
				rep.WriteText(cmd.OutOrStdout())
			}
			if rep.Overall == diag.Fail {
				var failed []string
				for _, r := range rep.Results {
					if r.Verdict == diag.Fail {
						failed = append(failed, r.Check)
					}
				}
				return checkFailed(errors.New("doctor: failed checks: " + strings.Join(failed, ", ")))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	cmd.Flags().BoolVar(&noProbe, "no-probe", false, "do not install throwaway offload SAs")
	cmd.Flags().StringVar(&opts.WantEswitch, "eswitch", "", "eswitch mode the configuration needs: legacy or switchdev")
	cmd.Flags().StringSliceVar(&opts.Only, "check", nil, "run only these checks (repeat or comma-separate)")
	cmd.Flags().StringVar(&factsIn, "facts", "", "diagnose facts saved by --save-facts instead of this host")
	cmd.Flags().StringVar(&factsOut, "save-facts", "", "also write the facts read from the host to this file")
	cmd.Flags().StringVar(&hostFile, "host", "", "count the offloaded SAs this host.yaml adds with those installed (sa-budget)")
	return cmd
}
