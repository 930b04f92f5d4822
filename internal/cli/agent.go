// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"sluice/internal/agent"
	"sluice/internal/fileread"
	"sluice/internal/fleet"
	"sluice/internal/fleet/v1alpha1"
	"sluice/internal/overlay"
)

func newAgentCmd() *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Keep this host in its overlay's desired state, from the Kubernetes API or a host.yaml, and report offload truth",
		Long: `Run the per-host agent: a reconcile loop over the plan/apply engine of
sluice apply. It keeps the host in its desired state (drift is repaired and
logged), never half-applies (a failed step rolls back to the last good
state, which is kept in --state-dir so restarts and reboots resume from it),
and reports the offload truth of every SA: the mode the kernel holds
(packet, crypto, none), whether the device's IPsec counters move with the
SA's traffic, a fallback alarm, and the reasons the better modes were
refused; as the Host object's status and as Prometheus metrics (--metrics).

With the Kubernetes API (--kubeconfig off-cluster, in-cluster in a pod) the
desired state is rendered from the Overlay that selects this host's Host
object and from the other members' Host objects: every agent computes its
own peers, there is no leader. Membership (the Host's labels) and
addresses (spec.vtep, spec.underlay) are the administrator's: the agent
writes its Host's status and publishes its certificate. Given --vtep and
--underlay, an agent whose Host does not exist yet creates it without
labels (a member of nothing until an administrator labels it); it never
changes the addresses of an existing Host. An API outage changes nothing on the
data path. A deleted Overlay, namespace or CRD changes nothing either
unless the Overlay said deletionPolicy: Teardown; a host whose labels no
longer match its still-existing Overlay tears down.

With -f host.yaml the agent runs without Kubernetes: the same reconcile of
that file at every --interval (manual keys allowed there, as in apply).

Manifests: deploy/ (CRDs, RBAC, DaemonSet); systemd: contrib/systemd/
sluice-agent.service. docs/fleet.md has the walk-through and the metrics.`,
		Example: `  # a hypervisor that is not a Kubernetes node
  sluice agent --kubeconfig /etc/sluice/kubeconfig --name hv-a \
    --vtep 10.99.0.1 --underlay 192.0.2.1/24 --underlay-if bond0 \
    --ca /etc/sluice/ca.pem --cert /etc/sluice/hv-a.pem --private-key /etc/sluice/hv-a.key \
    --metrics 127.0.0.1:9478
  # then, as the administrator: kubectl -n sluice-system label host hv-a sluice.dev/overlay=prod

  # without Kubernetes: keep one host.yaml applied, export metrics
  sluice agent -f /etc/sluice/host.yaml --metrics 127.0.0.1:9478`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runAgent(cmd, f) },
	}
	fl := cmd.Flags()
	addFileFlag(cmd, &f.file, "", "run from this host.yaml, without Kubernetes")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of an agent off-cluster (in a pod: the ServiceAccount)")
	fl.StringVar(&f.namespace, "namespace", "sluice-system", "namespace of the Overlay and Host objects")
	fl.StringVar(&f.name, "name", "", "this host's Host object name (default: $NODE_NAME, else the host name)")
	fl.StringVar(&f.vtep, "vtep", "", "VTEP address to register (placed on lo as a /32 or /128)")
	fl.StringVar(&f.underlay, "underlay", "", "underlay address/prefix to register (192.0.2.1/24)")
	fl.StringVar(&f.underlayIf, "underlay-if", "", "uplink interface (VTEP MTU computed from it; offload device)")
	fl.StringVar(&f.gateway, "gateway", "", "next hop to VTEPs outside the underlay subnet")
	fl.StringVar(&f.ca, "ca", "/etc/sluice/ca.pem", "CA certificate that signed every host's certificate")
	fl.StringVar(&f.cert, "cert", "", "this host's certificate (PEM; published in its Host object)")
	fl.StringVar(&f.key, "private-key", "", "this host's private key (PEM, mode 0600; never leaves the host)")
	fl.StringVar(&f.vici, "vici", "", "charon's VICI socket (default unix:///var/run/charon.vici)")
	fl.StringVar(&f.stateDir, "state-dir", agent.DefaultStateDir, "last good state and rendered host documents, kept across reboots (created 0700)")
	fl.StringVar(&f.runDir, "run-dir", overlay.DefaultStateDir, "apply journal of this boot (tmpfs; where sluice teardown --state-dir looks by default)")
	fl.DurationVar(&f.interval, "interval", 30*time.Second, "compare the host with its desired state at least this often (drift repair)")
	fl.DurationVar(&f.maxBackoff, "max-backoff", 10*time.Minute, "a desired state that failed is tried again after --interval, doubling per failure up to this")
	fl.DurationVar(&f.settle, "settle", 5*time.Second, "a new desired state must stay the same this long before it is applied (label churn)")
	fl.StringVar(&f.metrics, "metrics", "", "serve Prometheus metrics on ADDR:PORT (/metrics)")
	return cmd
}

type agentFlags struct {
	file, kubeconfig, namespace, name      string
	vtep, underlay, underlayIf, gateway    string
	ca, cert, key, vici, stateDir, metrics string
	runDir                                 string
	interval, settle, maxBackoff           time.Duration
}

func runAgent(cmd *cobra.Command, f agentFlags) error {
	o := agent.Options{File: f.file, Kubeconfig: f.kubeconfig, Namespace: f.namespace, Name: f.name,
		StateDir: f.stateDir, RunDir: f.runDir, Interval: f.interval, MaxBackoff: f.maxBackoff, Settle: f.settle, MetricsAddr: f.metrics, Log: cmd.ErrOrStderr()}
	if o.Name == "" {
		o.Name = os.Getenv("NODE_NAME")
	}
	if f.interval < time.Second {
		return usageErrorf("--interval %v: at least 1s", f.interval)
	}
	if f.file == "" {
		o.Local = fleet.Local{Name: o.Name, VICI: f.vici, CA: f.ca, Cert: f.cert, PrivKey: f.key}
		for flag, p := range map[string]*string{"ca": &o.Local.CA, "cert": &o.Local.Cert, "private-key": &o.Local.PrivKey} {
			if *p == "" {
				continue
			}
			a, err := filepath.Abs(*p)
			if err != nil {
				return usageErrorf("--%s %s: %v", flag, *p, err)
			}
			*p = a
		}
		if f.vtep != "" || f.underlay != "" {
			spec, err := agentSpec(f)
			if err != nil {
				return err
			}
			o.Spec = spec
		}
	}
	a, err := agent.New(o)
	if err != nil {
		return err
	}
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	return a.Run(ctx)
}

// agentSpec is the Host spec the agent registers, checked here so a typo
// is a usage error naming the flag rather than an API refusal.
func agentSpec(f agentFlags) (*v1alpha1.HostSpec, error) {
	if _, err := netip.ParseAddr(f.vtep); err != nil {
		return nil, usageErrorf("--vtep %q: not an IP address (write 10.99.0.1)", f.vtep)
	}
	if _, err := netip.ParsePrefix(f.underlay); err != nil {
		return nil, usageErrorf("--underlay %q: not an address with a prefix length (write 192.0.2.1/24)", f.underlay)
	}
	if f.gateway != "" {
		if _, err := netip.ParseAddr(f.gateway); err != nil {
			return nil, usageErrorf("--gateway %q: not an IP address", f.gateway)
		}
	}
	s := &v1alpha1.HostSpec{VTEP: f.vtep, Underlay: v1alpha1.Underlay{Address: f.underlay, Interface: f.underlayIf, Gateway: f.gateway}}
	if f.cert != "" {
		b, err := fileread.Read(f.cert, fileread.KeyLimit)
		if err != nil {
			return nil, fmt.Errorf("--cert: %w", err)
		}
		pem, err := agent.PublicCert(b)
		if err != nil {
			return nil, fmt.Errorf("--cert %s: %w", f.cert, err)
		}
		s.Certificate = pem
	}
	return s, nil
}
