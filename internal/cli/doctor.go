// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"sluice/internal/config"
	"sluice/internal/diag"
	"sluice/internal/fileread"
)

func newDoctorCmd() *cobra.Command {
	var f doctorFlags
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the host for what breaks or slows IPsec offload, and say why and how to fix it",
		Long: `Run checks over the host's kernel, interfaces, bonds, devlink devices, XFRM
state, tc rules and NIC firmware. Each result has a verdict ([ OK ], [INFO],
[WARN], [FAIL], [SKIP] when it cannot be checked here), the evidence it rests
on, and the fix.

Checks (select some with --check):
  kernel-features  XFRM, ESP and rfc4106(gcm(aes)) work (tried in a throwaway namespace)
  kernel-version   the release has packet offload (6.2), the ICMP-error FWD
                   lookup (6.9) and per-CPU SAs (6.13)
  strongswan       charon's (or swanctl's) version: hw_offload = packet needs
                   5.9.10, per_cpu_sas 6.0.2
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
                   its VFs; netdevsim: 33 per port); -f adds a host.yaml's
  bond-port-offload SAs offloaded to one port of an active-backup bond: the
                   bond does not move them at failover
  driver-quirks    packet offload that leaks on this driver and kernel (sluice's
                   driver table): subnet selectors on a driver that matches
                   them exactly, non-ESN inbound SAs without anti-replay, bond
                   ports on kernels that accept cleartext on offloaded IN policies
  firmware         SRIOV_EN, NUM_OF_VFS, LAG_RESOURCE_ALLOCATION,
                   FLEX_PARSER_PROFILE_ENABLE, HAIRPIN_DATA_BUFFER_LOCK via
                   mstconfig or mlxconfig, when installed
  xdp-mode         XDP programs in generic instead of native mode

The host is read once; --save-facts writes what was read to a file, and
--facts diagnoses such a file (from another host) instead of this one.
Needs root for the probes.`,
		Example: `  sluice doctor
  sluice doctor --check bond-offload --check esp-offload
  sluice doctor --eswitch switchdev --json
  sluice doctor -f /etc/sluice/host.yaml --check sa-budget
  sluice doctor --save-facts gw1.json   # then, elsewhere: sluice doctor --facts gw1.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDoctor(cmd.OutOrStdout(), f) },
	}
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print a JSON object")
	cmd.Flags().BoolVar(&f.noProbe, "no-probe", false, "do not install throwaway offload SAs")
	cmd.Flags().StringVar(&f.opts.WantEswitch, "eswitch", "", "eswitch mode the configuration needs: legacy or switchdev")
	cmd.Flags().StringSliceVar(&f.opts.Only, "check", nil, "run only these checks (repeat or comma-separate)")
	cmd.Flags().StringVar(&f.factsIn, "facts", "", "diagnose facts saved by --save-facts instead of this host")
	cmd.Flags().StringVar(&f.factsOut, "save-facts", "", "also write the facts read from the host to this file")
	addFileFlag(cmd, &f.hostFile, "", "count the offloaded SAs this host.yaml adds with those installed (sa-budget)", "host")
	return exits(cmd, ExitCheckFailed, "a check failed")
}

type doctorFlags struct {
	asJSON, noProbe   bool
	factsIn, factsOut string
	hostFile          string
	opts              diag.DoctorOptions
}

func runDoctor(w io.Writer, f doctorFlags) error {
	opts := f.opts
	if opts.WantEswitch != "" && opts.WantEswitch != "legacy" && opts.WantEswitch != "switchdev" {
		return usageErrorf("--eswitch %q: want legacy or switchdev", opts.WantEswitch)
	}
	if f.hostFile != "" {
		h, err := config.LoadHost(f.hostFile)
		if err != nil {
			return fmt.Errorf("-f: %w", err)
		}
		opts.PlannedSAs = diag.PlannedSAsOf(h)
	}
	facts, err := doctorFacts(f)
	if err != nil {
		return err
	}
	rep, err := diag.Diagnose(facts, opts)
	if err != nil {
		return fmt.Errorf("--check: %w", err)
	}
	if err := emit(w, f.asJSON, rep, func() { renderDoctor(w, rep) }); err != nil {
		return err
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
}

// doctorFacts reads the host, or the file --facts names, and writes what
// it read to --save-facts.
func doctorFacts(f doctorFlags) (*diag.Facts, error) {
	var facts *diag.Facts
	if f.factsIn != "" {
		b, err := fileread.Read(f.factsIn, fileread.StateLimit)
		if err != nil {
			return nil, fmt.Errorf("--facts: %w", err)
		}
		facts = &diag.Facts{}
		if err := json.Unmarshal(b, facts); err != nil {
			return nil, fmt.Errorf("--facts %s: %w (write one with sluice doctor --save-facts)", f.factsIn, err)
		}
	} else {
		facts = diag.Gather(diag.GatherOptions{FS: diag.Host, NoProbe: f.noProbe})
	}
	if f.factsOut != "" {
		b, err := json.MarshalIndent(facts, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(f.factsOut, append(b, '\n'), 0o644); err != nil {
			return nil, fmt.Errorf("--save-facts: %w", err)
		}
	}
	return facts, nil
}
