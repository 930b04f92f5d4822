package cli

import (
	"errors"
	"log/slog"
	"os/signal"
	goruntime "runtime"
	"syscall"

	"github.com/spf13/cobra"

	"sluice/internal/api"
	"sluice/internal/config"
	"sluice/internal/gateway"
)

func init() { register(newGatewayCmd) }

func newGatewayCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run, stop and explain the XDP fast path of an IPsec gateway",
		Long: `The gateway fast path mirrors the kernel's XFRM policies and SAs into an XDP
program and forwards in XDP the traffic whose SA the NIC packet-offloads,
leaving everything else to the kernel. See docs/fastpath.md.`,
	}
	cmd.AddCommand(newGatewayRunCmd(), newGatewayStopCmd(), newGatewayExplainCmd())
	return cmd
}

func newGatewayRunCmd() *cobra.Command {
	var cfgPath string
	cmd := &cobra.Command{
		Use:   "run -c gateway.yaml",
		Short: "Attach the fast path and mirror XFRM state until stopped",
		Long: `Attach the XDP fast path to the interfaces of gateway.yaml, mirror the
kernel's XFRM policies and SAs into it (or the file's static policies in a
lab), and follow their changes until SIGINT/SIGTERM.

Maps and XDP links are pinned under pin-dir: when this process exits the fast
path closes (the kernel forwards everything) but stays attached, and the next
'sluice gateway run' adopts it without a gap. 'sluice gateway stop' detaches.
If this process dies, the fast path closes by itself after the lease.`,
		Example: "  sluice gateway run -c /etc/sluice/gateway.yaml",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g, err := config.LoadGateway(cfgPath)
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
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			opts.Log.Info("sluice gateway starting", "config", cfgPath, "policy-source", string(g.PolicySource), "pin-dir", g.PinDir, "lease", g.Lease)
			return gateway.Run(ctx, opts)
		},
	}
	cmd.Flags().StringVarP(&cfgPath, "config", "c", "/etc/sluice/gateway.yaml", "gateway configuration file")
	return cmd
}

func newGatewayStopCmd() *cobra.Command {
	var pinDir string
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
touches another's daemon.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return gateway.Stop(pinDir, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&pinDir, "pin-dir", config.DefaultPinDir, "bpffs directory of the pinned maps and links")
	return cmd
}

// errNoGateway is returned by explain when neither a running gateway nor a
// config file is available.
var errNoGateway = errors.New("no gateway is running here")

func newGatewayExplainCmd() *cobra.Command {
	var (
		cfgPath, iface, hexFrame, pinDir, socket string
		asJSON                                   bool
	)
	cmd := &cobra.Command{
		Use:   "explain [--iface IF] [--config gateway.yaml] [--json] <packet>",
		Short: "Show what the fast path does with a packet, and why",
		Long: `Run the fast path over one packet with BPF_PROG_RUN, like 'ip route get' for
the fast path: the verdict, the reason, the policy that decided (kernel index,
selector, priority, direction) and the rewritten output.

Without --config it uses the live, pinned maps of the running gateway. With
--config and policy-source: static it builds the tables from the file, with
no daemon. The packet is given as fields:

  src ADDR dst ADDR [proto tcp|udp|icmp|icmpv6|N] [sport N] [dport N]
  [type N] [code N] [ttl N] [vlan N] [len N]

or as an Ethernet frame in hex with --hex.`,
		Example: `  sluice gateway explain --iface p1 src 16.0.0.1 dst 48.0.1.9 proto udp dport 53
  sluice gateway explain -c lab.yaml --iface lan0 --json src fd00::1 dst 2001:db8:48::9 ttl 1`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExplain(cmd, explainArgs{cfgPath, iface, hexFrame, pinDir, socket, asJSON}, args)
		},
	}
	cmd.Flags().StringVarP(&cfgPath, "config", "c", "", "gateway.yaml with static policies (no daemon needed)")
	cmd.Flags().StringVar(&iface, "iface", "", "interface the packet arrives on")
	cmd.Flags().StringVar(&hexFrame, "hex", "", "the packet as an Ethernet frame in hex")
	cmd.Flags().StringVar(&pinDir, "pin-dir", config.DefaultPinDir, "bpffs directory of the running gateway")
	cmd.Flags().StringVar(&socket, "socket", api.DefaultSocket, "the running gateway's API socket, asked which tier (flower or XDP) serves the deciding policy")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// buildInfo is this binary's version as the daemon reports it.
func buildInfo() api.Build {
	return api.Build{Version: version, Commit: buildCommit(), GoVersion: goruntime.Version()}
}
