// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"sluice/internal/bench"
	"sluice/internal/lab"
)

func newLabCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "lab",
		Short: "Build, inspect and remove network-namespace labs for benchmarks",
		Long: `A lab is a set of network namespaces joined by veth pairs, addressed with the
BlueField-3 benchmark's plan, with a forwarder in the device under test:

  forwarder     gen --g0|lan0-- dut --wan0|s0-- sink
  gateway-pair  gen --g0|p1-- gw0 --p0|p0-- gw1 --p1|s0-- sink
  overlay-pair  h0 --p0|p0-- h1, a VXLAN per tunnel over ESP (needs ESP: --vm)
  gateway-model gen --g0|lan0-- dut --nm0|nm1-- peer, nm0/nm1 a NIC model pair
                (packet offload; needs the model: --vm)

Addresses (the BlueField-3 benchmark): the generator 10.0.0.1/24 behind 10.0.0.254 sends from
clients in 16.0.0.0/8 to 48.x.y.0/24, one /24 per tunnel; the sink is
11.0.0.1/24 behind 11.0.0.254; tunnel i runs between 123.0.0.1 and
123.0.(i/255).(i%255+1). Namespaces are named sl-NAME-ROLE; the lab's state
is under /run/sluice/lab/NAME. 'sluice bench run --lab NAME' sends traffic
through it.`,
		Example: `  sluice lab up gateway-pair --tunnels 1024 --forwarder sluice
  sluice lab status
  sluice bench run --lab lab --profile imix-mno-1 --rate-max 2Mpps
  sluice lab down`,
	}
}

func newLabUpCmd() *cobra.Command {
	var f labUpFlags
	cmd := &cobra.Command{
		Use:   "up TOPOLOGY [--vm [-- COMMAND...]]",
		Short: "Build a lab (idempotent) and install its forwarder",
		Long: `Build the lab's namespaces, veth pairs, addresses, routes and neighbours, and
install the forwarder in the device under test (dut, or gw0 and gw1):

  kernel        Linux IP forwarding (always on underneath the others)
  xdp-redirect  a bare XDP forwarder: MAC rewrite, TTL - 1, devmap redirect;
                the ceiling of XDP forwarding on this machine
  sluice        'sluice gateway run' with the lab's tunnels as static,
                packet-offloaded policies (on veth nothing encrypts; on a
                packet-offload NIC the NIC does)

overlay-pair has no forwarder: its two hosts h0 and h1 run the ConnectX-6 SR-IOV guide's
encrypted overlay, one VXLAN per tunnel (VNI i, h0's VTEP 123.0.0.1, h1's
123.0.x.y) in ESP transport mode with random per-lab AES-GCM keys, set up by
'sluice apply' of host files the lab writes (overlay addresses 48.x.y.1 on h0
and 48.x.y.2 on h1). It needs ESP, GCM and VXLAN in the kernel; where they are
missing it says so and exits 4: use --vm.

gateway-model puts the NIC model (kmod/nicmodel) under 'sluice gateway run':
the dut's SAs and policies (one tunnel, 10.0.0.0/8 <-> 48.0.0.0/8 between
123.0.0.1 and the peer's 123.0.0.254, random per-lab AES-GCM keys) are
packet-offloaded on its model port nm0, the peer decrypts in software, and
'sluice lab status' prints the model ports' IPsec counters (the peer's
rx_cleartext_packets counts cleartext on the wire). bench ping and iperf3
reach 48.0.0.1 behind the peer. --forwarder kernel leaves the gateway out.

Running it again on a lab that is up checks and completes it, and switches the
forwarder if --forwarder changed. A different topology or tunnel count under
the same --name is refused: take the lab down first. Needs root.

--vm builds the same lab inside the test VM ('sluice vm'), runs the command
after -- there (default: 'sluice lab status'), takes the lab down and powers
the VM off; sluice exits with the command's exit code. The VM lives for that
one command, so give it the whole job. 'sluice' in the command is this
binary; files it writes under the repository (or the working directory)
appear on the host. Never read throughput from the VM: it is emulated.`,
		Example: `  sluice lab up forwarder
  sluice lab up gateway-pair --tunnels 1024 --forwarder sluice --name gp
  sluice lab up forwarder --forwarder xdp-redirect --json
  sluice lab up overlay-pair --tunnels 4 --vm -- sluice bench ping --lab lab --count 1000
  sluice lab up overlay-pair --vm -- 'sluice bench iperf3 --lab lab --runs 3 --json > iperf.json'
  sluice lab up gateway-model --vm -- 'sluice bench ping --lab lab --count 50 && sluice lab status'`,
		Args:      cobra.MinimumNArgs(1),
		ValidArgs: lab.Topologies,
		RunE:      func(cmd *cobra.Command, args []string) error { return runLabUp(cmd, f, args) },
	}
	cmd.Flags().StringVar(&f.s.Name, "name", "lab", "lab name (1-12 of a-z, 0-9, -)")
	cmd.Flags().IntVar(&f.s.Tunnels, "tunnels", 1, fmt.Sprintf("tunnels: remote subnets 48.x.y.0/24 and their endpoints (1-%d)", lab.MaxTunnels))
	cmd.Flags().StringVar(&f.s.Forwarder, "forwarder", "", "forwarder in the device under test: "+strings.Join(lab.Forwarders, ", ")+" (default kernel; sluice on gateway-model)")
	cmd.Flags().Uint32Var(&f.s.Opts.DropEvery, "drop-every", 0, "xdp-redirect only: drop every Nth frame (a known loss, to test the benchmark)")
	cmd.Flags().StringVar(&f.rateLimit, "rate-limit", "", "xdp-redirect only: forward at most this rate, e.g. 200kpps (a known bottleneck, to test the benchmark)")
	cmd.Flags().BoolVar(&f.vm, "vm", false, "build the lab in the test VM, run the command after -- there (default: lab status), take the lab down and power off")
	cmd.Flags().DurationVar(&f.vmTimeout, "vm-timeout", 10*time.Minute, "with --vm: limit for the whole VM run, boot included")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print the lab as JSON")
	exits(cmd, ExitUnavailable, "the kernel lacks a feature the topology needs: use --vm")
	return exits(cmd, passthroughExit, "With --vm, a command that ran in the VM: its own exit code.")
}

type labUpFlags struct {
	s          lab.Spec
	asJSON, vm bool
	vmTimeout  time.Duration
	rateLimit  string
}

func runLabUp(cmd *cobra.Command, f labUpFlags, args []string) error {
	f.s.Topology = args[0]
	if f.rateLimit != "" {
		r, err := bench.ParseRate("--rate-limit", f.rateLimit)
		if err != nil || r.Unit != "pps" {
			return usageErrorf("--rate-limit %q: write a packet rate such as 200kpps", f.rateLimit)
		}
		f.s.Opts.RatePPS = uint64(r.Value)
	}
	if (f.s.Opts.DropEvery > 0 || f.s.Opts.RatePPS > 0) && f.s.Forwarder != lab.FwdXDPRedirect {
		return usageErrorf("--drop-every and --rate-limit apply to --forwarder %s only", lab.FwdXDPRedirect)
	}
	if f.s.Opts.DropEvery == 1 {
		return usageErrorf("--drop-every 1 would drop everything: use 2 or more (0: never)")
	}
	command := args[1:]
	if len(command) > 0 && (!f.vm || cmd.ArgsLenAtDash() != 1) {
		return usageErrorf("a command after the topology runs only with --vm, after --: sluice lab up %s --vm -- COMMAND", f.s.Topology)
	}
	// Validate checks the arguments and flags only (topology, name,
	// tunnels, forwarder); lab.Up checks it again.
	if err := f.s.Validate(); err != nil {
		return usageErrorf("%w", err)
	}
	if f.vm {
		ctx, stop := signalContext(cmd.Context())
		defer stop()
		code, err := lab.UpInVM(ctx, f.s, command, f.vmTimeout, f.asJSON, cmd.OutOrStdout())
		if err != nil {
			return err
		}
		if code != 0 {
			return &ExitError{Code: code, Err: fmt.Errorf("in the test VM: exit %d", code)}
		}
		return nil
	}
	progress := func(line string) {
		if !f.asJSON {
			fmt.Fprintln(cmd.OutOrStdout(), line)
		}
	}
	l, err := lab.Up(f.s, progress)
	if err != nil {
		var nv *lab.NeedsVMError
		if errors.As(err, &nv) {
			return &ExitError{Code: ExitUnavailable, Err: err}
		}
		return err
	}
	return emit(cmd.OutOrStdout(), f.asJSON, l, func() {
		if l.Topology == lab.OverlayPair {
			fmt.Fprintf(cmd.OutOrStdout(), "lab %s is up: %s, %d tunnel(s); measure across it with 'sluice bench ping --lab %s' or 'sluice bench iperf3 --lab %s'\n",
				l.Name, l.Topology, l.Tunnels, l.Name, l.Name)
		} else {
			fmt.Fprintf(cmd.OutOrStdout(), "lab %s is up: %s, %d tunnel(s), forwarder %s\n", l.Name, l.Topology, l.Tunnels, l.Forwarder)
		}
	})
}

// labNameArg is the lab a command acts on: NAME as an argument (as in
// 'lab down gp') or --name (as 'lab up' takes it), default "lab".
func labNameArg(args []string, flag string) (string, error) {
	switch {
	case len(args) == 1 && flag != "" && flag != args[0]:
		return "", fmt.Errorf("two lab names: %q and --name %q; give one", args[0], flag)
	case len(args) == 1:
		return args[0], nil
	case flag != "":
		return flag, nil
	}
	return "lab", nil
}

func newLabDownCmd() *cobra.Command {
	var f labNameFlags
	cmd := &cobra.Command{
		Use:   "down [NAME]",
		Short: "Remove a lab: daemons, XDP links, pins, namespaces, state",
		Long: `Remove everything 'sluice lab up' made for the lab NAME (default "lab"): stop
its gateway daemons, detach its XDP programs, delete its namespaces (and with
them their veths), unmount its bpffs and remove /run/sluice/lab/NAME. It
works on a half-built lab too, and removing a lab that does not exist is not
an error.`,
		Example: "  sluice lab down\n  sluice lab down gp --json",
		Args:    cobra.MaximumNArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return runLabDown(cmd, f, args) },
	}
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print what was removed as JSON")
	cmd.Flags().StringVar(&f.flagName, "name", "", "the lab, as 'lab up --name' took it (or give NAME)")
	return cmd
}

// labNameFlags are the flags of the commands that act on one named lab.
type labNameFlags struct {
	asJSON   bool
	flagName string
}

func runLabDown(cmd *cobra.Command, f labNameFlags, args []string) error {
	name, err := labNameArg(args, f.flagName)
	if err != nil {
		return err
	}
	res, err := lab.Down(name)
	if err != nil {
		return err
	}
	return emit(cmd.OutOrStdout(), f.asJSON, res, func() {
		if len(res.Namespaces) == 0 && len(res.Daemons) == 0 && len(res.Detached) == 0 {
			fmt.Fprintf(cmd.OutOrStdout(), "lab %s: nothing to remove\n", name)
		} else {
			fmt.Fprintf(cmd.OutOrStdout(), "lab %s removed: %d namespace(s), %d daemon(s) stopped, %d XDP link(s) detached\n",
				name, len(res.Namespaces), len(res.Daemons), len(res.Detached))
		}
	})
}

func newLabStatusCmd() *cobra.Command {
	var f labNameFlags
	cmd := &cobra.Command{
		Use:   "status [NAME]",
		Short: "List the labs that exist and whether they are whole",
		Long: `List every lab (or only NAME): topology, tunnels, forwarder, namespaces, and
what is missing (a namespace deleted by hand, a gateway daemon that died).
Namespaces named sl-NAME-* without lab state are listed too, as leftovers
for 'sluice lab down NAME'. Exits 1 when NAME is given and not up.`,
		Example: "  sluice lab status\n  sluice lab status gp --json",
		Args:    cobra.MaximumNArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return runLabStatus(cmd, f, args) },
	}
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&f.flagName, "name", "", "only this lab, as 'lab up --name' took it (or give NAME)")
	return cmd
}

func runLabStatus(cmd *cobra.Command, f labNameFlags, args []string) error {
	all, err := lab.List()
	if err != nil {
		return err
	}
	if len(args) == 1 || f.flagName != "" {
		name, err := labNameArg(args, f.flagName)
		if err != nil {
			return err
		}
		all = slices.DeleteFunc(all, func(s lab.Status) bool { return s.Name != name })
		if len(all) == 0 {
			return fmt.Errorf("lab %q is not up (start it with 'sluice lab up TOPOLOGY --name %s')", name, name)
		}
	}
	if f.asJSON {
		if all == nil {
			all = []lab.Status{}
		}
		return writeJSON(cmd.OutOrStdout(), all)
	}
	if len(all) == 0 {
		fmt.Fprintln(cmd.OutOrStdout(), "no labs")
		return nil
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTOPOLOGY\tTUNNELS\tFORWARDER\tSTATE\tNAMESPACES")
	for _, s := range all {
		state := "up"
		switch {
		case s.Topology == "":
			state = "leftover (lab down " + s.Name + ")"
		case len(s.Missing) > 0:
			state = "broken: missing " + strings.Join(s.Missing, ",")
		case len(s.DeadDaemon) > 0:
			state = "broken: gateway died in " + strings.Join(s.DeadDaemon, ",")
		}
		nss := slices.Sorted(maps.Values(s.Namespaces))
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", s.Name, s.Topology, s.Tunnels, s.Forwarder, state, strings.Join(nss, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range all {
		printModelCounters(cmd.OutOrStdout(), s)
	}
	return nil
}

// printModelCounters prints a gateway-model lab's model ports' ethtool -S
// IPsec counters, one line per port, in a fixed order.
func printModelCounters(w io.Writer, s lab.Status) {
	for _, p := range s.Model {
		fmt.Fprintf(w, "%s %s %s:", s.Name, p.Role, p.Port)
		if p.Err != "" {
			fmt.Fprintf(w, " %s\n", p.Err)
			continue
		}
		for _, k := range p.Order {
			fmt.Fprintf(w, " %s=%d", k, p.Counters[k])
		}
		fmt.Fprintln(w)
	}
}
