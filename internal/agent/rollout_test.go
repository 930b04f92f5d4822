// SPDX-License-Identifier: Apache-2.0

package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"sluice/internal/agent"
	"sluice/internal/config"
	"sluice/internal/fleet"
	"sluice/internal/fleet/kubetest"
	"sluice/internal/fleet/v1alpha1"
	"sluice/internal/kernel"
	"sluice/internal/swan"
)

// rolloutFleet is four netns hosts with charon and an agent each, on a
// real API server, in overlay prod with rekeyTime 1h.
type rolloutFleet struct {
	hosts    map[string]*fhost
	names    []string
	hostsAPI dynamic.ResourceInterface
	ovs      dynamic.ResourceInterface

	mu sync.Mutex
	// firstApplied is when each host first applied a document with the
	// rekey time being rolled out; before are the rollout states of the
	// hosts ordered before it, read from the API at that moment.
	rekey        time.Duration
	firstApplied map[string]time.Time
	before       map[string]string
}

func newRolloutFleet(t *testing.T) *rolloutFleet {
	needFleet(t)
	rf := &rolloutFleet{hosts: map[string]*fhost{}, names: []string{"hv-a", "hv-b", "hv-c", "hv-d"}, firstApplied: map[string]time.Time{}, before: map[string]string{}}
	var users []kubetest.User
	for _, n := range rf.names {
		users = append(users, kubetest.User{Name: "sluice:host:" + n, Groups: []string{"sluice:agents"}})
	}
	s := kubetest.Need(t, users...)
	admin := s.Install(t, "../..")
	ctx := context.Background()
	rf.ovs = admin.Resource(v1alpha1.OverlaysResource).Namespace("sluice-system")
	rf.hostsAPI = admin.Resource(v1alpha1.HostsResource).Namespace("sluice-system")
	u := newFleetUnderlay(t)
	pkiDir := u.pkiDir
	ov := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "fleet.sluice.dev/v1alpha1", "kind": "Overlay",
		"metadata": map[string]any{"name": "prod", "namespace": "sluice-system"},
		"spec": map[string]any{"members": map[string]any{"matchLabels": map[string]any{"sluice.dev/overlay": "prod"}},
			"segments": []any{map[string]any{"name": "t1", "vni": int64(100)}}, "keying": map[string]any{"mode": "ike", "rekeyTime": "1h"},
			"vtepPool": "10.99.0.0/24", "offload": "none", "initiationWindowSeconds": int64(2)}}}
	if _, err := rf.ovs.Create(ctx, ov, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, name := range rf.names {
		idx := i + 1
		fh := u.host(t, name, idx)
		c, err := swan.StartCharon(swan.CharonOptions{Dir: t.TempDir(), NetNS: fh.ns})
		if err != nil {
			t.Fatal(err)
		}
		fh.charon = c
		t.Cleanup(func() { _ = fh.charon.Stop() })
		vtep := fmt.Sprintf("10.99.0.%d", idx)
		ho := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "fleet.sluice.dev/v1alpha1", "kind": "Host",
			"metadata": map[string]any{"name": name, "namespace": "sluice-system", "labels": map[string]any{"sluice.dev/overlay": "prod"}},
			"spec":     map[string]any{"vtep": vtep, "underlay": map[string]any{"address": fmt.Sprintf("192.0.2.%d/24", idx), "interface": "eth0"}}}}
		if _, err := rf.hostsAPI.Create(ctx, ho, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cert, _ := os.ReadFile(filepath.Join(pkiDir, name+".pem"))
		pub, err := agent.PublicCert(cert)
		if err != nil {
			t.Fatal(err)
		}
		a, err := agent.New(agent.Options{Name: name, REST: s.Config("sluice:host:" + name), Namespace: "sluice-system",
			Local: fleet.Local{Name: name, CA: filepath.Join(pkiDir, "ca.pem"), Cert: filepath.Join(pkiDir, name+".pem"),
				PrivKey: filepath.Join(pkiDir, name+".key"), VICI: c.URI},
			Spec:     &v1alpha1.HostSpec{VTEP: vtep, Underlay: v1alpha1.Underlay{Address: fmt.Sprintf("192.0.2.%d/24", idx), Interface: "eth0"}, Certificate: pub},
			StateDir: fh.dir, RunDir: fh.dir, Interval: 2 * time.Second, Settle: 500 * time.Millisecond,
			InNS: func(f func() error) error { return kernel.InNetns(fh.h, f) }, Log: &logw{t: t},
			Reconciled: func(o agent.Outcome) {
				if o.Steps > o.Initiated {
					fh.applied.Add(1)
				}
				if o.Result == agent.ResultApplied {
					rf.sawApply(t, fh)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		fh.ag, fh.cancel, fh.done = a, cancel, make(chan struct{})
		go func() { defer close(fh.done); _ = a.Run(runCtx) }()
		rf.hosts[name] = fh
	}
	// Registered last, so it runs first: every agent stops before any
	// charon does (an agent initiating to a stopped charon waits for it).
	t.Cleanup(func() {
		for _, fh := range rf.hosts {
			fh.cancel()
		}
		for _, fh := range rf.hosts {
			<-fh.done
		}
	})
	rf.waitAll(t, "the 4-host mesh holds rekeyTime 1h", settings("1h0m0s", "1h6m0s"), v1alpha1.RolloutDone)
	return rf
}

func settings(rekey, life string) string {
	return "offload=none rekeyTime=" + rekey + " lifeTime=" + life
}

// heldRekey is the rekey time of the document a host last applied.
func heldRekey(t *testing.T, fh *fhost) time.Duration {
	p := filepath.Join(fh.dir, "fleet-prod.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		return 0
	}
	h, err := config.ParseHost(b, p)
	if err != nil || h.IPsec == nil || h.IPsec.IKE == nil {
		return 0
	}
	return h.IPsec.IKE.RekeyTime
}

// sawApply runs in a host's agent after an apply: the first apply of
// the rekey time being rolled out records when, and the rollout states
// of the hosts before it.
func (rf *rolloutFleet) sawApply(t *testing.T, fh *fhost) {
	rf.mu.Lock()
	want := rf.rekey
	_, seen := rf.firstApplied[fh.name]
	rf.mu.Unlock()
	if want == 0 || seen || heldRekey(t, fh) != want {
		return
	}
	var states []string
	for _, n := range rf.names {
		if n == fh.name {
			break
		}
		r, _ := rf.status(n)
		if r == nil {
			states = append(states, n+":none")
		} else {
			states = append(states, n+":"+r.State+"@"+r.Settings)
		}
	}
	rf.mu.Lock()
	rf.firstApplied[fh.name], rf.before[fh.name] = time.Now(), strings.Join(states, ", ")
	rf.mu.Unlock()
}

func (rf *rolloutFleet) status(name string) (*v1alpha1.HostRollout, []metav1.Condition) {
	u, err := rf.hostsAPI.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, nil
	}
	var st v1alpha1.HostStatus
	b, _ := json.Marshal(u.Object["status"])
	_ = json.Unmarshal(b, &st)
	return st.Rollout, st.Conditions
}

func (rf *rolloutFleet) waitAll(t *testing.T, what, settings, state string, names ...string) {
	t.Helper()
	if names == nil {
		names = rf.names
	}
	eventually(t, what, 90*time.Second, func() error {
		for _, n := range names {
			r, _ := rf.status(n)
			if r == nil || r.Settings != settings || r.State != state {
				return fmt.Errorf("%s: rollout %+v, want %s@%s", n, r, state, settings)
			}
		}
		return nil
	})
}

// roll starts a rollout of rekey time rekey: it patches the overlay.
func (rf *rolloutFleet) roll(t *testing.T, rekey string) {
	d, err := time.ParseDuration(rekey)
	if err != nil {
		t.Fatal(err)
	}
	rf.mu.Lock()
	rf.rekey, rf.firstApplied, rf.before = d, map[string]time.Time{}, map[string]string{}
	rf.mu.Unlock()
	patch := fmt.Sprintf(`{"spec":{"keying":{"rekeyTime":%q}}}`, rekey)
	if _, err := rf.ovs.Patch(context.Background(), "prod", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func gauge(t *testing.T, a *agent.Agent, name, label string) float64 {
	mfs, err := a.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			if label == "" || labelIs(m, label) {
				if m.Gauge != nil {
					return m.Gauge.GetValue()
				}
				return m.Counter.GetValue()
			}
		}
	}
	return -1
}

func labelIs(m *dto.Metric, v string) bool {
	for _, l := range m.Label {
		if l.GetValue() == v {
			return true
		}
	}
	return false
}

// An edit of rekeyTime rolls out host by host in the order of the names,
// each host only once the hosts before it report the new settings Done.
// A host that fails (its charon is down) stops the rollout: the hosts
// after it keep their settings, say why, and the failed host raises the
// metric; other edits still reach every host at once. Once the host
// recovers the rollout finishes. An edit that renegotiates nothing is
// not staged.
func TestFleetRollout(t *testing.T) {
	rf := newRolloutFleet(t)
	ctx := context.Background()

	t.Run("in order", func(t *testing.T) {
		rf.roll(t, "2h")
		rf.waitAll(t, "every host holds rekeyTime 2h", settings("2h0m0s", "2h12m0s"), v1alpha1.RolloutDone)
		rf.mu.Lock()
		defer rf.mu.Unlock()
		for i, n := range rf.names {
			at, ok := rf.firstApplied[n]
			if !ok {
				t.Fatalf("%s: no apply of rekeyTime 2h seen", n)
			}
			if i > 0 && !at.After(rf.firstApplied[rf.names[i-1]]) {
				t.Errorf("%s applied at %v, before %s (%v)", n, at, rf.names[i-1], rf.firstApplied[rf.names[i-1]])
			}
			want := []string{}
			for _, m := range rf.names[:i] {
				want = append(want, m+":Done@"+settings("2h0m0s", "2h12m0s"))
			}
			if rf.before[n] != strings.Join(want, ", ") {
				t.Errorf("%s applied while the hosts before it were %q", n, rf.before[n])
			}
		}
	})

	t.Run("a failed host holds the rest", func(t *testing.T) {
		b := rf.hosts["hv-b"]
		if err := b.charon.Stop(); err != nil {
			t.Fatal(err)
		}
		rf.roll(t, "3h")
		three := settings("3h0m0s", "3h18m0s")
		rf.waitAll(t, "hv-a takes the rollout", three, v1alpha1.RolloutDone, "hv-a")
		eventually(t, "hv-b fails it", 60*time.Second, func() error {
			r, _ := rf.status("hv-b")
			if r == nil || r.State != v1alpha1.RolloutFailed || !strings.Contains(r.Message, "applying "+three) {
				return fmt.Errorf("hv-b: %+v", r)
			}
			return nil
		})
		time.Sleep(4 * time.Second) // two --interval: hv-c and hv-d stay
		for _, n := range []string{"hv-c", "hv-d"} {
			r, conds := rf.status(n)
			c := meta.FindStatusCondition(conds, "Rollout")
			if r == nil || r.State != v1alpha1.RolloutWaiting || r.Settings != settings("2h0m0s", "2h12m0s") || c == nil || c.Reason != "Held" ||
				!strings.Contains(c.Message, "host hv-b failed the rollout") {
				t.Errorf("%s: rollout %+v, condition %+v", n, r, c)
			}
			if got := heldRekey(t, rf.hosts[n]); got != 2*time.Hour {
				t.Errorf("%s holds rekeyTime %v while hv-b failed", n, got)
			}
			if g := gauge(t, rf.hosts[n].ag, "sluice_agent_rollout_state", "Held"); g != 1 {
				t.Errorf("%s: sluice_agent_rollout_state{state=Held} = %v", n, g)
			}
		}
		if g := gauge(t, b.ag, "sluice_agent_rollout_state", "Failed"); g != 1 {
			t.Errorf("hv-b: sluice_agent_rollout_state{state=Failed} = %v", g)
		}
		if g := gauge(t, b.ag, "sluice_agent_rollout_failures_total", ""); g < 1 {
			t.Errorf("hv-b: sluice_agent_rollout_failures_total = %v", g)
		}

		// An edit that renegotiates nothing is not staged: a label on the
		// Overlay changes nothing anywhere, a new segment reaches every
		// host that can apply, the held ones too (with their settings).
		n0 := map[string]int64{}
		for _, n := range rf.names {
			n0[n] = rf.hosts[n].applied.Load()
		}
		if _, err := rf.ovs.Patch(ctx, "prod", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"net"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		for _, n := range []string{"hv-a", "hv-c", "hv-d"} {
			if d := rf.hosts[n].applied.Load() - n0[n]; d != 0 {
				t.Errorf("%s applied %d time(s) after a label on the overlay", n, d)
			}
		}
		seg := `{"spec":{"segments":[{"name":"t1","vni":100},{"name":"t2","vni":200}]}}`
		if _, err := rf.ovs.Patch(ctx, "prod", types.MergePatchType, []byte(seg), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "segment t2 on hv-a, hv-c and hv-d", 30*time.Second, func() error {
			for _, n := range []string{"hv-a", "hv-c", "hv-d"} {
				if out, err := exec.Command("ip", "-n", rf.hosts[n].ns, "link", "show", "sl-t2").CombinedOutput(); err != nil {
					return fmt.Errorf("%s: %s", n, out)
				}
			}
			return nil
		})
		for _, n := range []string{"hv-c", "hv-d"} {
			if got := heldRekey(t, rf.hosts[n]); got != 2*time.Hour {
				t.Errorf("%s took rekeyTime %v with the new segment", n, got)
			}
		}

		// hv-b's charon is back: it retries, and the rollout finishes.
		c, err := swan.StartCharon(swan.CharonOptions{Dir: b.charon.Opts.Dir, NetNS: b.ns})
		if err != nil {
			t.Fatal(err)
		}
		b.charon = c
		rf.waitAll(t, "the rollout finishes", three, v1alpha1.RolloutDone)
		rf.mu.Lock()
		defer rf.mu.Unlock()
		if !rf.firstApplied["hv-c"].After(rf.firstApplied["hv-b"]) || !rf.firstApplied["hv-d"].After(rf.firstApplied["hv-c"]) {
			t.Errorf("after hv-b recovered: applied at %v", rf.firstApplied)
		}
	})
}
