// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"sluice/internal/fleet/kubetest"
	"sluice/internal/fleet/v1alpha1"
)

// Two machines run an agent named hv-a, on the real API server with the
// host's own credential: the first claims the Host and acts; the second
// refuses (its outcomes are Refused, its log says why) and the first
// reports it in the DuplicateName condition. A later boot of the first
// machine (same machine id, new boot id) is not a duplicate.
func TestDuplicateHostNameRefused(t *testing.T) {
	s := kubetest.Need(t, kubetest.User{Name: "sluice:host:hv-a", Groups: []string{"sluice:agents"}})
	admin := s.Install(t, "../..")
	ctx := context.Background()
	hosts := admin.Resource(v1alpha1.HostsResource).Namespace("sluice-system")
	ho := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "fleet.sluice.dev/v1alpha1", "kind": "Host",
		"metadata": map[string]any{"name": "hv-a", "namespace": "sluice-system"},
		"spec":     map[string]any{"vtep": "10.200.0.1", "underlay": map[string]any{"address": "192.0.2.1/24", "interface": "eth0"}}}}
	if _, err := hosts.Create(ctx, ho, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	type run struct {
		mu       sync.Mutex
		outcomes []Outcome
		log      strings.Builder
		stop     func()
	}
	start := func(instance string) *run {
		r := &run{}
		a, err := New(Options{Name: "hv-a", Instance: instance, REST: s.Config("sluice:host:hv-a"), Namespace: "sluice-system",
			StateDir: t.TempDir(), RunDir: t.TempDir(), Interval: time.Second, Log: &lockedLog{mu: &r.mu, b: &r.log},
			Reconciled: func(o Outcome) { r.mu.Lock(); r.outcomes = append(r.outcomes, o); r.mu.Unlock() }})
		if err != nil {
			t.Fatal(err)
		}
		c, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = a.Run(c) }()
		r.stop = func() { cancel(); <-done }
		t.Cleanup(r.stop)
		return r
	}
	claim := func() (*v1alpha1.AgentClaim, *metav1.Condition) {
		u, err := hosts.Get(ctx, "hv-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var st v1alpha1.HostStatus
		b, _ := json.Marshal(u.Object["status"])
		_ = json.Unmarshal(b, &st)
		return st.Agent, meta.FindStatusCondition(st.Conditions, "DuplicateName")
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				c, d := claim()
				t.Fatalf("%s: not within 30 s (claim %+v, condition %+v)", what, c, d)
			}
		}
	}

	first := start("machine-1:boot-1")
	waitFor("the first agent claims hv-a", func() bool { c, _ := claim(); return c != nil && c.Instance == "machine-1:boot-1" })

	second := start("machine-2:boot-7")
	waitFor("the second agent refuses", func() bool {
		second.mu.Lock()
		defer second.mu.Unlock()
		return len(second.outcomes) >= 2
	})
	second.mu.Lock()
	for _, o := range second.outcomes {
		if o.Result != ResultRefused || !strings.Contains(o.Message, "claimed by the agent of another machine (instance machine-1:boot-1") {
			t.Errorf("second agent acted: %+v", o)
		}
	}
	if !strings.Contains(second.log.String(), "give each its own --name") {
		t.Errorf("second agent's log does not say why:\n%s", second.log.String())
	}
	second.mu.Unlock()
	waitFor("DuplicateName=True on hv-a", func() bool {
		c, d := claim()
		return c != nil && c.Instance == "machine-1:boot-1" && d != nil && d.Status == metav1.ConditionTrue && strings.Contains(d.Message, "machine-2:boot-7")
	})
	second.stop()

	// The first machine rebooted: its new agent takes the claim over.
	first.stop()
	again := start("machine-1:boot-2")
	waitFor("a new boot of the first machine claims hv-a", func() bool { c, _ := claim(); return c != nil && c.Instance == "machine-1:boot-2" })
	again.mu.Lock()
	defer again.mu.Unlock()
	for _, o := range again.outcomes {
		if o.Result == ResultRefused {
			t.Errorf("the first machine's new boot was refused: %+v", o)
		}
	}
}

type lockedLog struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
