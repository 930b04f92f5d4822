// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"log/slog"
	goruntime "runtime"

	"github.com/spf13/cobra"

	"sluice/internal/api"
	"sluice/internal/config"
	"sluice/internal/gateway"
)

func newGatewayCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "gateway",
		Short: "Run, stop and explain the XDP fast path of an IPsec gateway",
		Long: `The gateway fast path mirrors the kernel's XFRM policies and SAs into an XDP
program and forwards in XDP the traffic whose SA the NIC packet-offloads,
leaving everything else to the kernel. See docs/fastpath.md.`,
	}
}

func newGatewayRunCmd() *cobra.Command {
	var f gatewayRunFlags
	cmd := &cobra.Command{
		Use:   "run -f gateway.yaml",
		Short: "Attach the fast path and mirror XFRM state until stopped",
		Long: `Attach the XDP fast path to the interfaces of gateway.yaml, mirror the
kernel's XFRM policies and SAs into it (or the file's static policies in a
lab), and follow their changes until SIGINT/SIGTERM.

Maps and XDP links are pinned under pin-dir: when this process exits the fast
path closes (the kernel forwards everything) but stays attached, and the next
'sluice gateway run' adopts it without a gap. 'sluice gateway stop' detaches.
If this process dies, the fast path closes by itself after the lease.`,
		Example: "  sluice gateway run -f /etc/sluice/gateway.yaml",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runGatewayRun(cmd, f) },
	}
	addFileFlag(cmd, &f.file, "/etc/sluice/gateway.yaml", "gateway configuration file", "config/c")
	return cmd
}

type gatewayRunFlags struct {
	file string
}

// runGatewayRun starts the daemon: internal/gateway owns it; the CLI only
// loads the file, sets up logging and signals, and calls gateway.Run.
func runGatewayRun(cmd *cobra.Command, f gatewayRunFlags) error {
	g, err := config.LoadGateway(f.file)
	if err != nil {
		return err
	}
	opts, err := gateway.FromConfig(g, buildInfo())
	if err != nil {
		return err
	}
	opts.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	if err := gateway.ApplyDaemonSettings(g, opts.Log); err != nil {
		return err
	}
	// Written by gateway.Run once it holds the pin dir's lock, so
	// a refused second start never touches the first one's.
	opts.PIDFile = gateway.PIDFile(g.PinDir)
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	opts.Log.Info("sluice gateway starting", "config", f.file, "policy-source", string(g.PolicySource), "pin-dir", g.PinDir, "lease", g.Lease)
	return gateway.Run(ctx, opts)
}

func newGatewayStopCmd() *cobra.Command {
	var f gatewayStopFlags
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Stop the daemon and detach the fast path from every interface",
		Long: `Signal the 'sluice gateway run' of --pin-dir to stop, then detach the XDP
program from every interface it was pinned on and remove the pinned maps.
It also removes sluice's tc flower rules (docs/flower.md) from every
interface: unlike XDP, hardware rules outlive a killed daemon, so run
'sluice gateway stop' from the service's ExecStopPost. Traffic is
forwarded by the kernel from then on.

Each gateway records its pid per pin dir (/run/sluice/gateway.pid for the
default one, /run/sluice/gateway-<hash>.pid for others), and stop signals
the pid only if it still is a 'gateway run': stopping one gateway never
touches another's daemon. A daemon that could not write its pid file is
found by the lock it holds on its pin dir. Two stops at once are fine: the
second waits for the first and finds nothing left to detach.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runGatewayStop(cmd, f) },
	}
	cmd.Flags().StringVar(&f.pinDir, "pin-dir", config.DefaultPinDir, "bpffs directory of the pinned maps and links")
	return cmd
}

type gatewayStopFlags struct {
	pinDir string
}

func runGatewayStop(cmd *cobra.Command, f gatewayStopFlags) error {
	return gateway.Stop(f.pinDir, cmd.OutOrStdout(), cmd.ErrOrStderr())
}

func newGatewayExplainCmd() *cobra.Command {
	var f explainFlags
	cmd := &cobra.Command{
		Use:   "explain [--iface IF] [-f gateway.yaml] [--json] <packet>",
		Short: "Show what the fast path does with a packet, and why",
		Long: `Run the fast path over one packet with BPF_PROG_RUN, like 'ip route get' for
the fast path: the verdict, the reason, the policy that decided (kernel index,
selector, priority, direction) and the rewritten output.

Without -f it uses the live, pinned maps of the running gateway. With
-f gateway.yaml and policy-source: static it builds the tables from the file, with
no daemon. The packet is given as fields:

  src ADDR dst ADDR [proto tcp|udp|icmp|icmpv6|N] [sport N] [dport N]
  [type N] [code N] [ttl N] [vlan N] [len N]

or as an Ethernet frame in hex with --hex.`,
		Example: `  sluice gateway explain --iface p1 src 16.0.0.1 dst 48.0.1.9 proto udp dport 53
  sluice gateway explain -f lab.yaml --iface lan0 --json src fd00::1 dst 2001:db8:48::9 ttl 1`,
		RunE: func(cmd *cobra.Command, args []string) error { return runExplain(cmd, f, args) },
	}
	addFileFlag(cmd, &f.cfgPath, "", "gateway.yaml with static policies (no daemon needed)", "config/c")
	cmd.Flags().StringVar(&f.iface, "iface", "", "interface the packet arrives on")
	cmd.Flags().StringVar(&f.hexFrame, "hex", "", "the packet as an Ethernet frame in hex")
	cmd.Flags().StringVar(&f.pinDir, "pin-dir", config.DefaultPinDir, "bpffs directory of the running gateway")
	cmd.Flags().StringVar(&f.socket, "socket", config.DefaultAPISocket, "the running gateway's API socket, asked which tier (flower or XDP) serves the deciding policy")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
	return cmd
}

// buildInfo is this binary's version as the daemon reports it.
func buildInfo() api.Build {
	return api.Build{Version: version, Commit: buildCommit(), GoVersion: goruntime.Version()}
}
