// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"sluice/internal/fleet"
	"sluice/internal/kernel"
)

// A reboot: the host's kernel state is gone (a new network namespace)
// and so is /run (a new, empty run directory); the state directory on
// disk is kept. A new agent process, with the API unreachable, starts
// from the last good state on disk and applies it again.
func TestAgentStartsFromDiskAfterReboot(t *testing.T) {
	_, h1 := hostNS(t)
	state := filepath.Join(t.TempDir(), "state") // the agent creates it
	r1 := t.TempDir()
	r, err := NewReconciler(state, r1, "hv-a", t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	r.InNS = func(f func() error) error { return kernel.InNetns(h1, f) }
	good := Desired{Doc: []byte(goodDoc), File: filepath.Join(state, "agent-test.yaml")}
	if o := r.Reconcile(good); o.Result != ResultApplied {
		t.Fatalf("before the reboot: %+v", o)
	}

	ns2, h2 := hostNS(t) // the rebooted host: nothing set up
	r2 := t.TempDir()    // an empty /run
	outcomes := make(chan Outcome, 4)
	a, err := New(Options{Name: "hv-a", REST: &rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second}, Namespace: "sluice-system",
		StateDir: state, RunDir: r2, Interval: time.Hour, Log: &testLog{t},
		InNS:       func(f func() error) error { return kernel.InNetns(h2, f) },
		Reconciled: func(o Outcome) { outcomes <- o }})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(state); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("state dir: %v %v, want mode 0700", fi.Mode().Perm(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case o := <-outcomes:
		if o.Result != ResultApplied || o.Digest != fleet.Digest(good.Doc) {
			t.Fatalf("first reconcile after the reboot: %+v, want the last good state %s applied", o, fleet.Digest(good.Doc))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no reconcile within 30 s of the start, the API being down")
	}
	if fdb := ipn(t, ns2, "-d", "link", "show", "vx0"); !strings.Contains(fdb, "vxlan id 1024") {
		t.Fatalf("vx0 not set up again:\n%s", fdb)
	}
	// The journal went to the new run directory, not the state directory.
	if m, _ := filepath.Glob(filepath.Join(r2, "*")); len(m) == 0 {
		t.Fatalf("no journal in the run directory %s", r2)
	}
}

type testLog struct{ t *testing.T }

func (l *testLog) Write(b []byte) (int, error) {
	l.t.Logf("%s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
