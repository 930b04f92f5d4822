// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/kernel"
)

// The backoff alone: doubling from the base, capped, reset by a success,
// restarted by another desired state.
func TestBackoffDoublesCapsResets(t *testing.T) {
	b := backoff{base: time.Second, max: 5 * time.Second}
	now := time.Unix(1000, 0)
	var got []time.Duration
	for range 5 {
		got = append(got, b.after(Outcome{Result: ResultFailed}, "k", now))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
	if !b.holds("k", now.Add(4*time.Second)) || b.holds("k", now.Add(5*time.Second)) || b.holds("other", now) {
		t.Fatalf("holds: wrong window or key")
	}
	b.after(Outcome{Result: ResultRefused}, "k", now) // neither a failure nor a success
	if b.n != 5 {
		t.Fatalf("a refusal changed the count: %d", b.n)
	}
	b.after(Outcome{Result: ResultApplied}, "k", now)
	if b.holds("k", now) || b.after(Outcome{Result: ResultFailed}, "k", now) != time.Second {
		t.Fatal("a success did not reset the backoff")
	}
	if d := b.after(Outcome{Result: ResultFailed}, "k2", now); d != time.Second {
		t.Fatalf("another desired state starts at %v, want the base", d)
	}
}

// An agent (from a file, in a throwaway namespace) whose desired state
// fails every apply tries it less and less often, and applies at once a
// fixed file. Without the backoff it retries every --interval (100 ms).
func TestAgentFailedReconcilesBackOff(t *testing.T) {
	_, h := hostNS(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "host.yaml")
	bad := strings.Replace(goodDoc, "      - {address: 192.168.80.3, via: 192.168.70.3}\n",
		"      - {address: 192.168.80.3, via: 192.168.70.3}\n      - {address: 192.168.80.4, via: 10.99.0.1}\n", 1)
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	type attempt struct {
		at  time.Time
		out Outcome
	}
	var log []attempt
	a, err := New(Options{Name: "t", File: file, StateDir: filepath.Join(dir, "state"), RunDir: filepath.Join(dir, "run"),
		Interval: 100 * time.Millisecond, MaxBackoff: 800 * time.Millisecond, Log: &testLog{t},
		InNS:       func(f func() error) error { return kernel.InNetns(h, f) },
		Reconciled: func(o Outcome) { mu.Lock(); log = append(log, attempt{time.Now(), o}); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	time.Sleep(2500 * time.Millisecond)
	mu.Lock()
	fails := append([]attempt(nil), log...)
	mu.Unlock()
	if len(fails) < 4 {
		t.Fatalf("%d attempts in 2.5 s, want at least 4", len(fails))
	}
	for i, f := range fails {
		if f.out.Result != ResultFailed {
			t.Fatalf("attempt %d: %+v, want Failed", i, f.out)
		}
		if i == 0 {
			continue
		}
		// Lower bounds only: a loaded machine makes the gaps longer.
		want := min(100*time.Millisecond<<(i-1), 800*time.Millisecond)
		if gap := f.at.Sub(fails[i-1].at); gap < want-10*time.Millisecond {
			t.Fatalf("attempt %d came %v after the last, want at least %v (backoff)", i, gap, want)
		}
	}
	if err := os.WriteFile(file, []byte(goodDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	fixed := time.Now()
	for {
		mu.Lock()
		last := log[len(log)-1]
		mu.Unlock()
		if last.out.Result == ResultApplied {
			break
		}
		if time.Since(fixed) > 5*time.Second {
			t.Fatalf("the fixed file not applied within 5 s: %+v", last.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
