// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"cmp"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"sluice/internal/config"
	"sluice/internal/overlay"
)

// The encrypted overlay: sluice plan|apply|verify|teardown -f host.yaml.

const hostFileHelp = `host.yaml declares one host's encrypted overlay: uplinks (ports, MTU, an
active-backup bond), SR-IOV (VF count, eswitch mode, flow steering, per-VF
MAC/VLAN/trust/spoofchk and IPsec capability), VTEPs (VXLAN or Geneve, the
local address on lo as a /32, remotes and the routes to them) and IPsec
(manually keyed rfc4106(gcm(aes)) SAs and policies in transport or tunnel
mode, ESN, replay window, offload none|crypto|packet|auto). Keys come from
the key file named in the file, which must be readable by its owner only;
keys never appear in plans, logs or errors. Schema and one full example
per source (docs/sources.md): docs/overlay.md.

Commands act on the network namespace sluice runs in (use ip netns exec).`

// addHostFileFlag adds the required -f/--file host.yaml.
func addHostFileFlag(cmd *cobra.Command, file *string) {
	addFileFlag(cmd, file, "", "host file (host.yaml)")
	_ = cmd.MarkFlagRequired("file")
}

func newPlanCmd() *cobra.Command {
	var f planFlags
	cmd := &cobra.Command{
		Use:   "plan -f host.yaml",
		Short: "Compare host.yaml with the live host and list the steps apply would run",
		Long: `Compare host.yaml with the live host and list, in order, the steps that
would make the host match it, each with the equivalent ip, bridge, devlink,
ethtool or sysfs command (keys shown as <redacted>), or say "nothing to do".
Nothing is changed.

The order is the order apply uses: SR-IOV (VFs to 0 before the eswitch mode
or flow steering change), uplinks (bond, ports, MTU, addresses), then
encryption (SAs before policies), and only then connectivity (the VTEP
address on lo, the routes to remote VTEPs, the VTEP devices), so no VTEP
packet can leave unencrypted while apply runs. Guests come last: the guest
networks' bridges (Open vSwitch with its tunnel ports, or Linux), the
guests' ports, VF drivers (vfio-pci) and libvirt domains (ovs-vsctl, virsh
and sysfs commands; the domain XML in full).

` + hostFileHelp,
		Example: `  sluice plan -f /etc/sluice/host.yaml
  sluice plan -f host.yaml --json
  ip netns exec node-a sluice plan -f node-a.yaml --exit-code  # 3: changes pending`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runPlan(cmd.OutOrStdout(), f) },
	}
	addHostFileFlag(cmd, &f.file)
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print the plan as JSON")
	cmd.Flags().BoolVar(&f.exitCode, "exit-code", false, "exit 3 when there are steps to apply (0: nothing to do)")
	return exits(cmd, ExitCheckFailed, "--exit-code and there are steps to apply")
}

type planFlags struct {
	file             string
	asJSON, exitCode bool
}

// loadPlan reads host.yaml, its keys and the live host, and plans apply.
func loadPlan(file string) (*config.Host, *overlay.Plan, error) {
	h, keys, live, err := overlay.Load(file, true)
	if err != nil {
		return nil, nil, err
	}
	p, err := overlay.NewPlan(h, keys, live)
	return h, p, err
}

func runPlan(w io.Writer, f planFlags) error {
	_, p, err := loadPlan(f.file)
	if err != nil {
		return err
	}
	if err := emit(w, f.asJSON, p, func() { renderPlan(w, p, "apply") }); err != nil {
		return err
	}
	if f.exitCode && !p.Empty() {
		return checkFailed(fmt.Errorf("%d step(s) pending", len(p.Steps)))
	}
	return nil
}

func newApplyCmd() *cobra.Command {
	var f applyFlags
	cmd := &cobra.Command{
		Use:   "apply -f host.yaml",
		Short: "Make the host match host.yaml (idempotent; --dry-run prints the plan)",
		Long: `Make the host match host.yaml: run the plan's steps through netlink, sysfs,
devlink and ethtool ioctls (never by running ip). A second apply does
nothing. Apply stops at the first failing step and says which, with the
kernel's reason and the equivalent command; what was done before it is kept
and journaled, so applying again after fixing the cause completes the job
and teardown can undo it.

The journal (in --state-dir, on tmpfs) records what apply created and the
previous value of what it changed, so that teardown removes exactly that.

Offload: none, crypto and packet are taken as asked; the SA is read back
after it is added, because the kernel silently installs a crypto-offload SA
without offload when the device cannot offload it, and apply fails then.
auto tries packet, then crypto, then none, and reports what it obtained and
why the others were refused.

Manual keys: apply remembers (in a ledger beside the journal, as salted
digests) every manual key it installed, and refuses to install one again,
since the new SA would restart its sequence numbers under the same AES-GCM
key; --force overrides. Peers with keying: ike get fresh keys from
strongSwan instead: apply loads their connections into charon over VICI
and initiates them.

` + hostFileHelp,
		Example: `  sluice apply -f /etc/sluice/host.yaml
  sluice apply -f host.yaml --dry-run
  ip netns exec node-a sluice apply -f node-a.yaml --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runApply(cmd.OutOrStdout(), f) },
	}
	addHostFileFlag(cmd, &f.file)
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "print the plan and change nothing (same as sluice plan)")
	cmd.Flags().BoolVar(&f.force, "force", false, "install a manual key even though apply installed it before (its SA's sequence numbers start over under the same key: see docs/overlay.md, Keying)")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print the plan and the result as JSON")
	cmd.Flags().StringVar(&f.stateDir, "state-dir", overlay.DefaultStateDir, "where apply journals what it did (tmpfs)")
	return cmd
}

type applyFlags struct {
	file, stateDir        string
	dryRun, asJSON, force bool
}

// applyResult is apply --json: the plan, what was done, and the error.
type applyResult struct {
	Plan   *overlay.Plan   `json:"plan"`
	Result *overlay.Result `json:"result"`
	Error  string          `json:"error,omitempty"`
}

func runApply(w io.Writer, f applyFlags) error {
	h, p, err := loadPlan(f.file)
	if err != nil {
		return err
	}
	p.Force = f.force
	if f.dryRun {
		return emit(w, f.asJSON, p, func() { renderPlan(w, p, "apply (dry run: nothing changed)") })
	}
	var progress io.Writer
	if !f.asJSON {
		progress = w
		renderNotes(w, p.Notes)
	}
	res, err := overlay.Apply(p, f.stateDir, progress)
	if f.asJSON {
		return cmp.Or(writeJSON(w, applyResult{p, res, errString(err)}), err)
	}
	if res != nil {
		for _, o := range res.Offload {
			fmt.Fprintf(w, "offload: %s\n", o)
		}
	}
	if err != nil {
		return err
	}
	if p.Empty() {
		fmt.Fprintf(w, "%s: nothing to do: the host matches the file\n", h.File)
	} else {
		fmt.Fprintf(w, "applied %d step(s); journal %s\n", res.Done, res.Journal)
	}
	return nil
}

func newTeardownCmd() *cobra.Command {
	var f teardownFlags
	cmd := &cobra.Command{
		Use:   "teardown -f host.yaml",
		Short: "Remove what apply created from host.yaml, and put back what it changed",
		Long: `Remove exactly what apply created for host.yaml, and nothing else, in the
reverse order: VTEP devices, routes and the lo address first (so no VTEP
packet leaves unencrypted), then policies and SAs, then the bond (its ports
get their MTU and MAC back), then what apply changed on devices it did not
create (MTU, up/down, VF count, eswitch mode, flow steering, features),
restored from the journal where the value is still the one apply set.

Without a journal (an overlay set up by hand, or /run lost) teardown removes
the objects the file declares that match it, and says that attributes of
existing devices are left as they are. Keys are not needed.

` + hostFileHelp,
		Example: `  sluice teardown -f /etc/sluice/host.yaml
  sluice teardown -f host.yaml --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTeardown(cmd.OutOrStdout(), f) },
	}
	addHostFileFlag(cmd, &f.file)
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "print the teardown plan and change nothing")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print the plan and the result as JSON")
	cmd.Flags().StringVar(&f.stateDir, "state-dir", overlay.DefaultStateDir, "where apply journaled what it did")
	return cmd
}

type teardownFlags struct {
	file, stateDir string
	dryRun, asJSON bool
}

// teardownResult is teardown --json: the plan, the steps done, the error.
type teardownResult struct {
	Plan  *overlay.Plan `json:"plan"`
	Done  int           `json:"steps_done"`
	Error string        `json:"error,omitempty"`
}

func runTeardown(w io.Writer, f teardownFlags) error {
	h, _, live, err := overlay.Load(f.file, false)
	if err != nil {
		return err
	}
	j, has, err := overlay.LoadJournal(f.stateDir, h.Name, h.File)
	if err != nil {
		return err
	}
	p := overlay.NewTeardown(h, live, j, has)
	if f.dryRun {
		return emit(w, f.asJSON, p, func() { renderPlan(w, p, "tear down (dry run: nothing changed)") })
	}
	n, err := overlay.Teardown(p, j, func(i int, s overlay.Step) {
		if !f.asJSON {
			fmt.Fprintf(w, "[%d/%d] %s %s\n", i+1, len(p.Steps), s.Action, s.Object)
		}
	})
	if f.asJSON {
		return cmp.Or(writeJSON(w, teardownResult{p, n, errString(err)}), err)
	}
	renderNotes(w, p.Notes)
	if err != nil {
		return err
	}
	if p.Empty() {
		fmt.Fprintf(w, "%s: nothing to tear down\n", h.File)
	} else {
		fmt.Fprintf(w, "tore down %d step(s)\n", n)
	}
	return nil
}

func newVerifyCmd() *cobra.Command {
	var f verifyFlags
	cmd := &cobra.Command{
		Use:   "verify -f host.yaml [--traffic [--send-to ADDR]]",
		Short: "Prove the host matches host.yaml and its overlay traffic is encrypted; exit 3 if not",
		Long: `Check that the live host matches host.yaml (no step left to apply), that
every SA is installed with the offload the file asks for (for auto: which
one it got), and that every VTEP's traffic is covered by an SA pair.

With --traffic, also prove it with counters (the ConnectX-6 SR-IOV guide's "confirming ipsec is
being used"): the SA packet counters (ip -s xfrm state) and the offload
devices' ethtool IPsec counters are read, again after --window, and every SA
of the file must have counted packets in between. Traffic is whatever flows
during the window; --send-to ADDR sends UDP datagrams to ADDR (an overlay
address of a peer, port 9) during the window, whose packets (and the
peer's ICMP port-unreachable replies) cross both SAs.

--traffic also probes each packet-offloaded tunnel whose selectors are
wider than one host: 20 UDP datagrams from this host's address in the
local selector to the second address of the remote one (not its network
address); the device's ESP transmit counter must rise by as many. A device
that matches selector addresses exactly (mlx5 before 6.15) sends them in
cleartext: the check fails with the fix. The datagrams carry only
"sluice verify subnet probe".

` + hostFileHelp,
		Example: `  sluice verify -f /etc/sluice/host.yaml
  sluice verify -f host.yaml --traffic --window 5s   # while iperf3 runs
  sluice verify -f host.yaml --traffic --send-to 192.168.90.3 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runVerify(cmd.OutOrStdout(), f) },
	}
	addHostFileFlag(cmd, &f.file)
	cmd.Flags().BoolVar(&f.traffic, "traffic", false, "also check that the SA (and ethtool IPsec) counters rise while traffic flows")
	cmd.Flags().DurationVar(&f.window, "window", 3*time.Second, "how long to watch the counters with --traffic")
	cmd.Flags().StringVar(&f.sendTo, "send-to", "", "with --traffic: send UDP datagrams to this overlay address during the window")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	return exits(cmd, ExitCheckFailed, "a check failed (each check says what)")
}

type verifyFlags struct {
	file, sendTo    string
	traffic, asJSON bool
	window          time.Duration
}

func runVerify(w io.Writer, f verifyFlags) error {
	h, keys, live, err := overlay.Load(f.file, true)
	if err != nil {
		return err
	}
	r := overlay.Verify(h, keys, live)
	if f.traffic {
		if err := overlay.VerifyTraffic(h, r, f.window, f.sendTo); err != nil {
			return err
		}
		if err := overlay.ProbeSubnets(h, live, r); err != nil {
			return err
		}
	}
	if err := emit(w, f.asJSON, r, func() { renderVerify(w, r) }); err != nil {
		return err
	}
	if !r.OK {
		return checkFailed(fmt.Errorf("%s: verify failed", h.File))
	}
	return nil
}
