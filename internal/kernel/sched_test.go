// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"sluice/internal/testutil"
)

// TestDaemonSchedChild is the child of TestProcessSched: it applies
// the settings to itself (a fresh process, so the test binary's own
// threads are not touched), starts more threads, and prints what every
// thread has.
func TestDaemonSchedChild(t *testing.T) {
	if os.Getenv("SLUICE_SCHED_CHILD") == "" {
		t.Skip("run by TestProcessSched")
	}
	for _, set := range []func() error{
		func() error { return SetProcessAffinity([]int{0}) },
		func() error { return SetProcessRR(10) },
		LockProcessMemory,
	} {
		if err := set(); err != nil {
			t.Fatal(err)
		}
	}
	// Threads created after the call inherit the settings.
	done := make(chan bool)
	for i := 0; i < 4; i++ {
		go func() { runtime.LockOSThread(); <-done }()
	}
	runtime.Gosched()
	ts, err := ReadThreadSched(0)
	close(done)
	if err != nil {
		t.Fatal(err)
	}
	status, _ := os.ReadFile("/proc/self/status")
	json.NewEncoder(os.Stdout).Encode(map[string]any{"threads": ts, "status": string(status)})
}

// daemon-cpu, daemon-priority and lock-memory on a real process: every
// thread, including those started afterwards, runs on the CPU asked for
// with SCHED_RR at the priority asked for, and the memory is locked.
func TestProcessSched(t *testing.T) {
	testutil.RequireRoot(t, "real-time scheduling and mlockall")
	cmd := exec.Command(os.Args[0], "-test.run=^TestDaemonSchedChild$", "-test.v")
	cmd.Env = append(os.Environ(), "SLUICE_SCHED_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var rep struct {
		Threads []ThreadSched
		Status  string
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "{") {
			if err := json.Unmarshal([]byte(l), &rep); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(rep.Threads) < 5 {
		t.Fatalf("%d threads reported:\n%s", len(rep.Threads), out)
	}
	for _, th := range rep.Threads {
		if len(th.CPUs) != 1 || th.CPUs[0] != 0 || th.Policy != SchedRR || th.Priority != 10 {
			t.Errorf("thread %d: CPUs %v policy %d priority %d, want CPU 0, SCHED_RR (%d), 10", th.TID, th.CPUs, th.Policy, th.Priority, SchedRR)
		}
	}
	var vmlck string
	for _, l := range strings.Split(rep.Status, "\n") {
		if strings.HasPrefix(l, "VmLck:") {
			vmlck = strings.Join(strings.Fields(l)[1:], " ")
		}
	}
	if vmlck == "" || vmlck == "0 kB" {
		t.Errorf("VmLck %q: memory not locked", vmlck)
	}
}
