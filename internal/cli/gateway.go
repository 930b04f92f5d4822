package cli

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"sluice/internal/api"
	"sluice/internal/config"
	"sluice/internal/fastpath"
	"sluice/internal/flower"
	"sluice/internal/kernel"
)

func init() { register(newGatewayCmd) }

// gatewayPIDFile is where 'gateway run' with pinDir records its pid for
// 'gateway stop --pin-dir': one file per pin dir, so that stopping one
// gateway (a lab's, another namespace's) never signals another.
func gatewayPIDFile(pinDir string) string {
	if filepath.Clean(pinDir) == filepath.Clean(config.DefaultPinDir) {
		return "/run/sluice/gateway.pid"
	}
	sum := sha256.Sum256([]byte(filepath.Clean(pinDir)))
	return fmt.Sprintf("/run/sluice/gateway-%x.pid", sum[:6])
}

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
			opts, err := gatewayOptions(g)
			if err != nil {
				return err
			}
			opts.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			if err := applyDaemonSettings(g, opts.Log); err != nil {
				return err
			}
			// Written by RunGateway once it holds the pin dir's lock, so
			// a refused second start never touches the first one's.
			opts.PIDFile = gatewayPIDFile(g.PinDir)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			opts.Log.Info("sluice gateway starting", "config", cfgPath, "policy-source", string(g.PolicySource), "pin-dir", g.PinDir, "lease", g.Lease)
			return fastpath.RunGateway(ctx, opts)
		},
	}
	cmd.Flags().StringVarP(&cfgPath, "config", "c", "/etc/sluice/gateway.yaml", "gateway configuration file")
	return cmd
}

func readPIDFile(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil && pid > 0
}

// isGatewayRun reports whether pid is a 'sluice ... gateway run': a stale
// pid file must not make stop signal whatever process reused the pid.
func isGatewayRun(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "gateway" && args[i+1] == "run" {
			return true
		}
	}
	return false
}

// stopWait is how long stop waits for the daemon to exit after SIGTERM.
const stopWait = 10 * time.Second

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
			if pid, ok := readPIDFile(gatewayPIDFile(pinDir)); ok && isGatewayRun(pid) {
				if p, err := os.FindProcess(pid); err == nil && p.Signal(syscall.SIGTERM) == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "signalled daemon (pid %d)\n", pid)
				}
			}
			// Detach only once the daemon is gone (its lock is free):
			// a daemon still running would pin again what stop removes.
			if _, err := os.Stat(pinDir); err == nil {
				lock, err := fastpath.WaitLockPinDir(pinDir, stopWait)
				if err != nil {
					return fmt.Errorf("%w (it did not exit within %s of SIGTERM; nothing was detached)", err, stopWait)
				}
				defer lock.Release()
			}
			// Hardware rules outlive the daemon: remove sluice's flower
			// filters whether or not it is still running (a killed one
			// could not). Run this from the unit's ExecStopPost.
			if n, err := removeFlowerRules(); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "removing flower rules: %v\n", err)
			} else if n > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "removed %d flower rule(s)\n", n)
			}
			detached, err := fastpath.Detach(pinDir)
			for _, d := range detached {
				fmt.Fprintf(cmd.OutOrStdout(), "detached from %s\n", d)
			}
			if len(detached) == 0 && err == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "nothing attached (no pins under %s)\n", pinDir)
			}
			return err
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

func removeFlowerRules() (int, error) {
	fs, err := kernel.OpenFlowerSocket()
	if err != nil {
		return 0, err
	}
	defer fs.Close()
	return flower.RemoveAll(fs)
}
