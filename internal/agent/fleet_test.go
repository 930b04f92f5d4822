// SPDX-License-Identifier: Apache-2.0

package agent_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vishvananda/netns"

	"sluice/internal/agent"
	"sluice/internal/fleet"
	"sluice/internal/fleet/kubetest"
	"sluice/internal/fleet/v1alpha1"
	"sluice/internal/kernel"
	"sluice/internal/swan"
	"sluice/internal/testutil"
)

// A fleet on the host kernel: netns hosts on one bridged underlay, each
// with its own charon (real strongSwan, certificates made by pki) and its
// own agent, driven by a real kube-apiserver. The host kernel has no ESP,
// so CHILD_SAs cannot be installed here (the VM has ESP): what is checked
// is everything up to them: every agent computes its peers, loads one IKE
// connection per peer (its trap policies hold the traffic, never in
// clear), builds the VTEP with one FDB entry and one route per peer, and
// reports it; joins, leaves, an API outage, an agent restart, a deleted
// overlay and a VTEP claim behave as docs/fleet.md says.

type fhost struct {
	applied  atomic.Int64 // reconciles that changed the host
	name, ns string
	h        netns.NsHandle
	idx      int
	charon   *swan.Charon
	dir      string
	cancel   context.CancelFunc
	done     chan struct{}
	ag       *agent.Agent
}

func sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func needFleet(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces and charon")
	for _, p := range []string{swan.CharonBinary, "/usr/bin/pki"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s missing: make setup installs strongSwan", p)
		}
	}
}

type logw struct {
	mu sync.Mutex
	t  *testing.T
}

func (w *logw) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func eventually(t *testing.T, what string, limit time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, limit, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// dataPath is what a host holds: VTEP device and FDB, routes, XFRM
// policies, charon's connections.
func dataPath(t *testing.T, fh *fhost) string {
	out, _ := exec.Command("ip", "netns", "exec", fh.ns, "bridge", "fdb", "show", "dev", "sl-t1").CombinedOutput()
	// Only what sluice installs: entries the bridge learns from traffic
	// come and go.
	var fdb []byte
	for _, l := range strings.SplitAfter(string(out), "\n") {
		if strings.Contains(l, "permanent") {
			fdb = append(fdb, l...)
		}
	}
	link, _ := exec.Command("ip", "-n", fh.ns, "-d", "link", "show", "sl-t1").CombinedOutput()
	routes, _ := exec.Command("ip", "-n", fh.ns, "route", "show", "table", "main").CombinedOutput()
	polOut, _ := exec.Command("ip", "-n", fh.ns, "xfrm", "policy").CombinedOutput()
	// The SPI in an outbound template is charon's: a renegotiated or
	// rekeyed CHILD_SA changes it.
	pol := spiRE.ReplaceAll(polOut, []byte("spi *"))
	conns := ""
	if c, err := swan.Connect(context.Background(), fh.charon.URI); err == nil {
		names, _ := c.ConnNames()
		conns = strings.Join(names, " ")
		c.Close()
	}
	return fmt.Sprintf("link:%s\nfdb:%s\nroutes:%s\npolicies:%s\nconns:%s\n", link, fdb, routes, pol, conns)
}

var spiRE = regexp.MustCompile(`spi 0x[0-9a-f]+`)

// peersOf lists the remote VTEPs of a host's FDB.
func peersOf(t *testing.T, fh *fhost) []string {
	out, _ := exec.Command("ip", "netns", "exec", fh.ns, "bridge", "fdb", "show", "dev", "sl-t1").CombinedOutput()
	var r []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "00:00:00:00:00:00" && f[1] == "dst" {
			r = append(r, f[2])
		}
	}
	return r
}

func conns(fh *fhost) []string {
	c, err := swan.Connect(context.Background(), fh.charon.URI)
	if err != nil {
		return nil
	}
	defer c.Close()
	n, _ := c.ConnNames()
	return n
}

func TestFleetMesh(t *testing.T) {
	needFleet(t)
	fleetMesh(t, false, time.Second)
}

// meshTraffic, in the VM (which has ESP), checks that the overlay
// carries traffic between every pair of members, encrypted; the host
// kernel has no ESP and skips it.
type meshTraffic interface {
	// pingAll pings between every pair of members over the overlay.
	pingAll(t *testing.T, members []*fhost)
	// during runs f with a ping from a to b going on, and fails on loss.
	during(t *testing.T, a, b *fhost, f func())
	// wire checks the underlay carried ESP only.
	wire(t *testing.T)
}

func fleetMesh(t *testing.T, esp bool, settle time.Duration) {
	var users []kubetest.User
	for _, n := range []string{"hv-a", "hv-b", "hv-c", "hv-d", "hv-e"} {
		users = append(users, kubetest.User{Name: "sluice:host:" + n, Groups: []string{"sluice:agents"}})
	}
	s := kubetest.Need(t, users...)
	admin := s.Install(t, "../..")
	ctx := context.Background()
	ovs := admin.Resource(v1alpha1.OverlaysResource).Namespace("sluice-system")
	hostsAPI := admin.Resource(v1alpha1.HostsResource).Namespace("sluice-system")

	// The underlay: a bridge in a switch namespace.
	u := newFleetUnderlay(t)
	sw, pkiDir := u.sw, u.pkiDir
	var tr meshTraffic
	if esp {
		tr = startWire(t, sw)
	}

	hosts := map[string]*fhost{}
	startAgent := func(fh *fhost, vtep string) {
		cert, _ := os.ReadFile(filepath.Join(pkiDir, fh.name+".pem"))
		pub, err := agent.PublicCert(cert)
		if err != nil {
			t.Fatal(err)
		}
		h := fh.h
		a, err := agent.New(agent.Options{Name: fh.name, REST: s.Config("sluice:host:" + fh.name), Namespace: "sluice-system",
			Local: fleet.Local{Name: fh.name, CA: filepath.Join(pkiDir, "ca.pem"), Cert: filepath.Join(pkiDir, fh.name+".pem"),
				PrivKey: filepath.Join(pkiDir, fh.name+".key"), VICI: fh.charon.URI},
			Spec: &v1alpha1.HostSpec{VTEP: vtep, Underlay: v1alpha1.Underlay{Address: fmt.Sprintf("192.0.2.%d/24", fh.idx), Interface: "eth0"},
				Certificate: pub},
			StateDir: fh.dir, RunDir: fh.dir, Interval: 3 * time.Second, Settle: settle,
			InNS: func(f func() error) error { return kernel.InNetns(h, f) }, Log: &logw{t: t},
			Reconciled: func(o agent.Outcome) {
				if o.Steps > o.Initiated {
					fh.applied.Add(1)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		c, cancel := context.WithCancel(ctx)
		fh.ag, fh.cancel, fh.done = a, cancel, make(chan struct{})
		go func() { defer close(fh.done); _ = a.Run(c) }()
	}
	stopAgent := func(fh *fhost) {
		fh.cancel()
		<-fh.done
	}
	addHost := func(name string, idx int, vtep string) *fhost {
		fh := u.host(t, name, idx)
		// Under qemu TCG, with the API server busy, charon may miss
		// StartCharon's 15 s: try again.
		var c *swan.Charon
		var err error
		for try := 0; try < 3; try++ {
			if c, err = swan.StartCharon(swan.CharonOptions{Dir: t.TempDir(), NetNS: fh.ns}); err == nil {
				break
			}
			t.Logf("charon for %s: %v (retrying)", name, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		fh.charon = c
		t.Cleanup(func() { _ = c.Stop() })
		hosts[name] = fh
		// The administrator (provisioning) makes the Host: membership
		// and addresses are not the agent's (deploy/rbac.yaml).
		ho := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "fleet.sluice.dev/v1alpha1", "kind": "Host",
			"metadata": map[string]any{"name": name, "namespace": "sluice-system", "labels": map[string]any{"sluice.dev/overlay": "prod"}},
			"spec":     map[string]any{"vtep": vtep, "underlay": map[string]any{"address": fmt.Sprintf("192.0.2.%d/24", idx), "interface": "eth0"}}}}
		if _, err := hostsAPI.Create(ctx, ho, metav1.CreateOptions{}); err != nil {
			t.Fatalf("administrator creating Host %s: %v", name, err)
		}
		startAgent(fh, vtep)
		t.Cleanup(func() {
			select {
			case <-fh.done:
			default:
				stopAgent(fh)
			}
		})
		return fh
	}
	ov := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "fleet.sluice.dev/v1alpha1", "kind": "Overlay",
		"metadata": map[string]any{"name": "prod", "namespace": "sluice-system"},
		"spec": map[string]any{"members": map[string]any{"matchLabels": map[string]any{"sluice.dev/overlay": "prod"}},
			"segments": []any{map[string]any{"name": "t1", "vni": int64(100)}}, "keying": map[string]any{"mode": "ike"},
			"vtepPool": "10.99.0.0/24", "offload": "none", "initiationWindowSeconds": int64(2)}}}
	if _, err := ovs.Create(ctx, ov, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := func(fh *fhost, peers ...string) func() error {
		return func() error {
			got := peersOf(t, fh)
			if strings.Join(got, ",") != strings.Join(peers, ",") {
				return fmt.Errorf("%s: fdb remotes %v, want %v", fh.name, got, peers)
			}
			n := 0
			for _, c := range conns(fh) {
				if strings.HasPrefix(c, "sluice-fleet-prod-") {
					n++
				}
			}
			if n != len(peers) {
				return fmt.Errorf("%s: %d IKE connections loaded, want %d", fh.name, n, len(peers))
			}
			return nil
		}
	}
	t.Run("join", func(t *testing.T) {
		addHost("hv-a", 1, "10.99.0.1")
		addHost("hv-b", 2, "10.99.0.2")
		addHost("hv-c", 3, "10.99.0.3")
		eventually(t, "3-host mesh", 90*time.Second, func() error {
			for _, e := range []error{want(hosts["hv-a"], "10.99.0.2", "10.99.0.3")(), want(hosts["hv-b"], "10.99.0.1", "10.99.0.3")(),
				want(hosts["hv-c"], "10.99.0.1", "10.99.0.2")()} {
				if e != nil {
					return e
				}
			}
			return nil
		})
		// Routes via the peers' underlay addresses, with the VTEP source.
		if r := sh(t, "ip", "-n", hosts["hv-a"].ns, "route", "show", "10.99.0.3"); !strings.Contains(r, "via 192.0.2.3 dev eth0 proto 115 src 10.99.0.1") {
			t.Errorf("route: %q", r)
		}
		// Trap policies: the peer's traffic waits for IKE, never in clear.
		if p := sh(t, "ip", "-n", hosts["hv-a"].ns, "xfrm", "policy"); !strings.Contains(p, "src 10.99.0.1/32 dst 10.99.0.3/32") {
			t.Errorf("no policy for hv-c:\n%s", p)
		}
		if tr != nil {
			tr.pingAll(t, []*fhost{hosts["hv-a"], hosts["hv-b"], hosts["hv-c"]})
		}
		// Status: tunnels per peer, last apply, conditions.
		eventually(t, "hv-a status", 30*time.Second, func() error {
			u, err := hostsAPI.Get(ctx, "hv-a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			tun, _, _ := unstructured.NestedSlice(u.Object, "status", "tunnels")
			res, _, _ := unstructured.NestedString(u.Object, "status", "lastApply", "result")
			if len(tun) != 2 || (res != agent.ResultApplied && res != agent.ResultNothingToDo) {
				return fmt.Errorf("tunnels %v, lastApply %q", tun, res)
			}
			return nil
		})
	})
	t.Run("add a 4th host", func(t *testing.T) {
		addHost("hv-d", 4, "10.99.0.4")
		eventually(t, "4-host mesh", 90*time.Second, func() error {
			for _, n := range []string{"hv-a", "hv-b", "hv-c", "hv-d"} {
				if got := peersOf(t, hosts[n]); len(got) != 3 {
					return fmt.Errorf("%s: remotes %v", n, got)
				}
			}
			return nil
		})
		if tr != nil {
			tr.pingAll(t, []*fhost{hosts["hv-a"], hosts["hv-b"], hosts["hv-c"], hosts["hv-d"]})
		}
	})
	t.Run("label churn", func(t *testing.T) {
		// hv-d's label flaps 20 times in 2 s and ends as it was: the
		// others see one change that settles to none (--settle), and
		// apply nothing.
		// hv-a may still be initiating the previous step's IKE SAs (each
		// retry is an apply): wait until it has applied nothing for 2 s,
		// so that only the churn can move the count.
		quietSince, n0 := time.Now(), hosts["hv-a"].applied.Load()
		for deadline := time.Now().Add(30 * time.Second); time.Since(quietSince) < 2*time.Second; time.Sleep(200 * time.Millisecond) {
			if n := hosts["hv-a"].applied.Load(); n != n0 {
				quietSince, n0 = time.Now(), n
			}
			if time.Now().After(deadline) {
				t.Fatalf("hv-a kept applying for 30 s before the churn")
			}
		}
		before := dataPath(t, hosts["hv-a"])
		for i := 0; i < 20; i++ {
			lbl := map[string]string{"sluice.dev/overlay": []string{"retired", "prod"}[i%2]}
			eventually(t, "relabel", 10*time.Second, func() error {
				u, err := hostsAPI.Get(ctx, "hv-d", metav1.GetOptions{})
				if err != nil {
					return err
				}
				u.SetLabels(lbl)
				_, err = hostsAPI.Update(ctx, u, metav1.UpdateOptions{})
				return err
			})
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(3 * time.Second)
		if n := hosts["hv-a"].applied.Load() - n0; n != 0 {
			t.Errorf("hv-a applied %d time(s) during the churn", n)
		}
		if now := dataPath(t, hosts["hv-a"]); now != before {
			t.Errorf("hv-a changed during the churn:\n%s\n%s", before, now)
		}
	})
	t.Run("remove one", func(t *testing.T) {
		// A merge patch: the agents write hv-c's status meanwhile.
		retire := []byte(`{"metadata":{"labels":{"sluice.dev/overlay":"retired"}}}`)
		if _, err := hostsAPI.Patch(ctx, "hv-c", types.MergePatchType, retire, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "hv-c's tunnels torn down everywhere", 60*time.Second, func() error {
			for _, e := range []error{want(hosts["hv-a"], "10.99.0.2", "10.99.0.4")(), want(hosts["hv-b"], "10.99.0.1", "10.99.0.4")(),
				want(hosts["hv-d"], "10.99.0.1", "10.99.0.2")()} {
				if e != nil {
					return e
				}
			}
			if out, _ := exec.Command("ip", "-n", hosts["hv-c"].ns, "link", "show", "sl-t1").CombinedOutput(); !strings.Contains(string(out), "does not exist") {
				return fmt.Errorf("hv-c still has its VTEP: %s", out)
			}
			if r := sh(t, "ip", "-n", hosts["hv-a"].ns, "route", "show", "10.99.0.3"); r != "" {
				return fmt.Errorf("hv-a still routes to hv-c: %q", r)
			}
			return nil
		})
	})
	t.Run("API server restart changes nothing", func(t *testing.T) {
		before := map[string]string{}
		for _, n := range []string{"hv-a", "hv-b", "hv-d"} {
			before[n] = dataPath(t, hosts[n])
		}
		outage := func() {
			s.StopAPI()
			time.Sleep(8 * time.Second) // more than two intervals
			for n, b := range before {
				if now := dataPath(t, hosts[n]); now != b {
					t.Errorf("%s changed during the outage:\nbefore:\n%s\nnow:\n%s", n, b, now)
				}
			}
		}
		if tr != nil {
			tr.during(t, hosts["hv-a"], hosts["hv-d"], outage)
		} else {
			outage()
		}
		if err := s.StartAPI(ctx); err != nil {
			t.Fatal(err)
		}
		// The watches resume: hv-c rejoins when labelled back.
		eventually(t, "relabel after the restart", 60*time.Second, func() error {
			u, err := hostsAPI.Get(ctx, "hv-c", metav1.GetOptions{})
			if err != nil {
				return err
			}
			u.SetLabels(map[string]string{"sluice.dev/overlay": "prod"})
			_, err = hostsAPI.Update(ctx, u, metav1.UpdateOptions{})
			return err
		})
		eventually(t, "hv-c rejoined", 120*time.Second, func() error {
			for _, n := range []string{"hv-a", "hv-b", "hv-c", "hv-d"} {
				if got := peersOf(t, hosts[n]); len(got) != 3 {
					return fmt.Errorf("%s remotes %v", n, got)
				}
			}
			return nil
		})
	})
	t.Run("agent killed and restarted", func(t *testing.T) {
		a := hosts["hv-a"]
		before := dataPath(t, a)
		kill := func() {
			stopAgent(a)
			time.Sleep(4 * time.Second)
			if now := dataPath(t, a); now != before {
				t.Errorf("hv-a changed with its agent stopped:\n%s\n%s", before, now)
			}
			startAgent(a, "10.99.0.1")
		}
		if tr != nil {
			tr.during(t, a, hosts["hv-b"], kill)
		} else {
			kill()
		}
		// Restarted: the last good state is held, nothing re-applied.
		eventually(t, "restarted agent reconciled", 30*time.Second, func() error {
			if n := a.ag.ReconcileCount(); n < 2 {
				return fmt.Errorf("%d reconciles", n)
			}
			return nil
		})
		if now := dataPath(t, a); now != before {
			t.Errorf("hv-a changed across its agent's restart:\n%s\n%s", before, now)
		}
	})
	t.Run("a host claiming another's VTEP", func(t *testing.T) {
		e := addHost("hv-e", 5, "10.99.0.1")
		eventually(t, "hv-e refused", 30*time.Second, func() error {
			u, err := hostsAPI.Get(ctx, "hv-e", metav1.GetOptions{})
			if err != nil {
				return err
			}
			res, _, _ := unstructured.NestedString(u.Object, "status", "lastApply", "result")
			msg, _, _ := unstructured.NestedString(u.Object, "status", "lastApply", "message")
			if res != agent.ResultRefused || !strings.Contains(msg, "already claimed by host hv-a") {
				return fmt.Errorf("%q %q", res, msg)
			}
			return nil
		})
		// Everyone keeps peering with hv-a, the first claimant, at its
		// underlay address.
		if r := sh(t, "ip", "-n", hosts["hv-b"].ns, "route", "show", "10.99.0.1"); !strings.Contains(r, "via 192.0.2.1 ") {
			t.Errorf("hv-b's route to 10.99.0.1: %q", r)
		}
		if got := peersOf(t, hosts["hv-b"]); len(got) != 3 {
			t.Errorf("hv-b remotes: %v", got)
		}
		if out, _ := exec.Command("ip", "-n", e.ns, "link", "show", "sl-t1").CombinedOutput(); !strings.Contains(string(out), "does not exist") {
			t.Errorf("hv-e applied something: %s", out)
		}
	})
	t.Run("a host nobody can route to is left out alone", func(t *testing.T) {
		// hv-far is in another subnet, and no member has a gateway: its
		// peers would route its VTEP via an off-link next hop, which the
		// kernel refuses. Every member leaves it out and says why; the
		// rest stays applied.
		before := map[string]string{}
		for _, n := range []string{"hv-a", "hv-b"} {
			before[n] = dataPath(t, hosts[n])
		}
		far := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "fleet.sluice.dev/v1alpha1", "kind": "Host",
			"metadata": map[string]any{"name": "hv-far", "namespace": "sluice-system", "labels": map[string]any{"sluice.dev/overlay": "prod"}},
			"spec":     map[string]any{"vtep": "10.99.0.66", "underlay": map[string]any{"address": "198.51.100.66/24", "interface": "eth0"}}}}
		if _, err := hostsAPI.Create(ctx, far, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "hv-a reports hv-far left out", 30*time.Second, func() error {
			u, err := hostsAPI.Get(ctx, "hv-a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, _ := c.(map[string]any); m["type"] == "PeersComplete" && m["status"] == "False" && strings.Contains(fmt.Sprint(m["message"]), "host hv-far left out") {
					return nil
				}
			}
			return fmt.Errorf("conditions %v", conds)
		})
		time.Sleep(4 * time.Second) // past --settle and an interval
		for n, b := range before {
			if now := dataPath(t, hosts[n]); now != b {
				t.Errorf("%s changed when hv-far joined:\nbefore:\n%s\nnow:\n%s", n, b, now)
			}
			if u, err := hostsAPI.Get(ctx, n, metav1.GetOptions{}); err == nil {
				if res, _, _ := unstructured.NestedString(u.Object, "status", "lastApply", "result"); res == agent.ResultFailed {
					t.Errorf("%s: lastApply Failed", n)
				}
			}
		}
		if err := hostsAPI.Delete(ctx, "hv-far", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a route sluice did not make leaves only that peer out", func(t *testing.T) {
		// hv-a already routes 10.99.0.77 elsewhere (the operator's route
		// to a service address). A member with that VTEP joins: hv-a
		// leaves that one peer out, says why and keeps its route and its
		// other pairs; hv-b peers with it.
		sh(t, "ip", "-n", hosts["hv-a"].ns, "route", "add", "10.99.0.77/32", "via", "192.0.2.200", "dev", "eth0")
		defer sh(t, "ip", "-n", hosts["hv-a"].ns, "route", "del", "10.99.0.77/32")
		clash := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "fleet.sluice.dev/v1alpha1", "kind": "Host",
			"metadata": map[string]any{"name": "hv-clash", "namespace": "sluice-system", "labels": map[string]any{"sluice.dev/overlay": "prod"}},
			"spec":     map[string]any{"vtep": "10.99.0.77", "underlay": map[string]any{"address": "192.0.2.77/24", "interface": "eth0"}}}}
		if _, err := hostsAPI.Create(ctx, clash, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := hostsAPI.Delete(ctx, "hv-clash", metav1.DeleteOptions{}); err != nil {
				t.Error(err)
			}
			eventually(t, "hv-b prunes hv-clash", 30*time.Second, func() error {
				if slices.Contains(peersOf(t, hosts["hv-b"]), "10.99.0.77") {
					return fmt.Errorf("hv-b still peers with hv-clash")
				}
				return nil
			})
		}()
		eventually(t, "hv-a leaves hv-clash out, hv-b peers with it", 30*time.Second, func() error {
			u, err := hostsAPI.Get(ctx, "hv-a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			found := false
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, _ := c.(map[string]any); m["type"] == "PeersComplete" && m["status"] == "False" &&
					strings.Contains(fmt.Sprint(m["message"]), "host hv-clash left out: this host already has the route 10.99.0.77/32 via 192.0.2.200") {
					found = true
				}
			}
			if !found {
				return fmt.Errorf("hv-a conditions %v", conds)
			}
			if !slices.Contains(peersOf(t, hosts["hv-b"]), "10.99.0.77") {
				return fmt.Errorf("hv-b does not peer with hv-clash: %v", peersOf(t, hosts["hv-b"]))
			}
			return nil
		})
		if r := sh(t, "ip", "-n", hosts["hv-a"].ns, "route", "show", "10.99.0.77"); !strings.Contains(r, "via 192.0.2.200") || strings.Contains(r, "proto 115") {
			t.Errorf("hv-a's own route changed: %q", r)
		}
		if slices.Contains(peersOf(t, hosts["hv-a"]), "10.99.0.77") {
			t.Error("hv-a peers with hv-clash")
		}
		u, err := hostsAPI.Get(ctx, "hv-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res, _, _ := unstructured.NestedString(u.Object, "status", "lastApply", "result"); res == agent.ResultFailed || res == agent.ResultRefused {
			t.Errorf("hv-a: lastApply %s: one peer's route clash stopped the others", res)
		}
	})
	t.Run("a host being deleted is no member", func(t *testing.T) {
		// A finalizer holds hv-d after its deletion: the others stop
		// routing to it at once, as if it had left.
		// A merge patch, not a read-modify-write: the agents write
		// hv-d's status meanwhile, and an update would meet a conflict.
		hold := []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`)
		if _, err := hostsAPI.Patch(ctx, "hv-d", types.MergePatchType, hold, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := hostsAPI.Delete(ctx, "hv-d", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			eventually(t, "release hv-d", 10*time.Second, func() error {
				u, err := hostsAPI.Get(ctx, "hv-d", metav1.GetOptions{})
				if err != nil {
					return err
				}
				u.SetFinalizers(nil)
				_, err = hostsAPI.Update(ctx, u, metav1.UpdateOptions{})
				return err
			})
		}()
		eventually(t, "hv-d dropped while being deleted", 60*time.Second, func() error {
			for _, n := range []string{"hv-a", "hv-b"} {
				if r := sh(t, "ip", "-n", hosts[n].ns, "route", "show", "10.99.0.4"); r != "" {
					return fmt.Errorf("%s still routes to hv-d: %q", n, r)
				}
			}
			return nil
		})
	})
	t.Run("selector typo held", func(t *testing.T) {
		// A typo in spec.members selects no host: no agent tears down;
		// each holds its state and says why (MassRemovalHeld).
		before := map[string]string{}
		for _, n := range []string{"hv-a", "hv-b"} {
			before[n] = dataPath(t, hosts[n])
		}
		setSelector := func(v string) {
			eventually(t, "edit the selector", 10*time.Second, func() error {
				u, err := ovs.Get(ctx, "prod", metav1.GetOptions{})
				if err != nil {
					return err
				}
				if err := unstructured.SetNestedField(u.Object, v, "spec", "members", "matchLabels", "sluice.dev/overlay"); err != nil {
					return err
				}
				_, err = ovs.Update(ctx, u, metav1.UpdateOptions{})
				return err
			})
		}
		setSelector("prdo")
		eventually(t, "hv-a holds", 30*time.Second, func() error {
			u, err := hostsAPI.Get(ctx, "hv-a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			res, _, _ := unstructured.NestedString(u.Object, "status", "lastApply", "result")
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, _ := c.(map[string]any); m["type"] == "MassRemovalHeld" && m["status"] == "True" && res == agent.ResultHeld {
					return nil
				}
			}
			return fmt.Errorf("lastApply %q, conditions %v", res, conds)
		})
		time.Sleep(4 * time.Second) // past --settle and an interval
		for n, b := range before {
			if now := dataPath(t, hosts[n]); now != b {
				t.Errorf("%s changed after a selector typo:\nbefore:\n%s\nnow:\n%s", n, b, now)
			}
		}
		setSelector("prod")
		eventually(t, "hv-a ready again", 30*time.Second, func() error {
			u, err := hostsAPI.Get(ctx, "hv-a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if res, _, _ := unstructured.NestedString(u.Object, "status", "lastApply", "result"); res == agent.ResultHeld {
				return fmt.Errorf("still held")
			}
			return nil
		})
	})
	t.Run("deleted overlay: orphaned, nothing torn down", func(t *testing.T) {
		before := dataPath(t, hosts["hv-b"])
		if err := ovs.Delete(ctx, "prod", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "hv-b orphaned", 30*time.Second, func() error {
			u, err := hostsAPI.Get(ctx, "hv-b", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if res, _, _ := unstructured.NestedString(u.Object, "status", "lastApply", "result"); res != agent.ResultOrphaned {
				return fmt.Errorf("lastApply %q", res)
			}
			return nil
		})
		if now := dataPath(t, hosts["hv-b"]); now != before {
			t.Errorf("hv-b changed when the overlay was deleted:\n%s\n%s", before, now)
		}
	})
	if tr != nil {
		t.Run("ESP only on the wire", func(t *testing.T) { tr.wire(t) })
	}
}

// fleetUnderlay is the fleet tests' underlay: a bridge in a switch
// namespace, and a CA in pkiDir that signs each host's certificate.
type fleetUnderlay struct {
	sw, pkiDir string
}

func newFleetUnderlay(t *testing.T) *fleetUnderlay {
	t.Helper()
	u := &fleetUnderlay{pkiDir: t.TempDir()}
	u.sw, _ = testutil.NewNetNS(t)
	sh(t, "ip", "-n", u.sw, "link", "add", "br0", "type", "bridge")
	sh(t, "ip", "-n", u.sw, "link", "set", "br0", "up")
	u.pki(t, "--gen --type ecdsa --size 256 --outform pem > ca.key")
	u.pki(t, "--self --ca --lifetime 30 --in ca.key --dn 'CN=sluice fleet test CA' --outform pem > ca.pem")
	return u
}

func (u *fleetUnderlay) pki(t *testing.T, args string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "pki "+args)
	cmd.Dir = u.pkiDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pki %s: %v\n%s", args, err, out)
	}
}

// host makes host name's namespace, its port on the bridge with
// 192.0.2.idx, and its key and certificate.
func (u *fleetUnderlay) host(t *testing.T, name string, idx int) *fhost {
	t.Helper()
	ns, h := testutil.NewNetNS(t)
	fh := &fhost{name: name, ns: ns, h: h, idx: idx, dir: t.TempDir()}
	sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	sh(t, "ip", "-n", u.sw, "link", "add", "p-"+name, "type", "veth", "peer", "name", "eth0", "netns", ns)
	sh(t, "ip", "-n", u.sw, "link", "set", "p-"+name, "master", "br0", "up")
	sh(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("192.0.2.%d/24", idx), "dev", "eth0")
	sh(t, "ip", "-n", ns, "link", "set", "eth0", "up")
	u.pki(t, "--gen --type ecdsa --size 256 --outform pem > "+name+".key")
	u.pki(t, "--pub --in "+name+".key | pki --issue --cacert ca.pem --cakey ca.key --lifetime 30 --dn 'CN="+name+"' --san "+name+" --outform pem > "+name+".pem")
	if err := os.Chmod(filepath.Join(u.pkiDir, name+".key"), 0o600); err != nil {
		t.Fatal(err)
	}
	return fh
}
