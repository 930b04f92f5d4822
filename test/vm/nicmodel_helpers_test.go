// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"sluice/internal/testutil"
)

// The NIC model's helpers live in internal/testutil (nicmodel.go); these
// are their names here.

func ipPacket(t *testing.T) string { t.Helper(); return testutil.IPPacket(t) }

// nicPair creates a pair of model ports, devA in nsA and devB in nsB,
// both up, and returns their names ("nmA", "nmB").
func (l *lab) nicPair(t *testing.T, nsA, nsB string) (string, string) {
	t.Helper()
	return l.nicPairNamed(t, nsA, "nmA", nsB, "nmB")
}

// nicPairNamed is nicPair with the ports' names.
func (l *lab) nicPairNamed(t *testing.T, nsA, a, nsB, b string) (string, string) {
	t.Helper()
	testutil.NicPair(t, nsA, a, nsB, b)
	return a, b
}

func macOf(t *testing.T, ns, dev string) string { t.Helper(); return testutil.MacOf(t, ns, dev) }

func ethStats(t *testing.T, ns, dev string) map[string]uint64 {
	t.Helper()
	return testutil.EthStats(t, ns, dev)
}

func statDelta(before, after map[string]uint64, keys ...string) map[string]uint64 {
	return testutil.StatDelta(before, after, keys...)
}

// xfrmMonitor starts `ip xfrm monitor` in a namespace; the returned
// function stops it and returns what it printed.
func xfrmMonitor(t *testing.T, ns string, what ...string) func() string {
	t.Helper()
	var out strings.Builder
	cmd := exec.Command("ip", append([]string{"-n", ns, "xfrm", "monitor"}, what...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("ip xfrm monitor: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // subscribed before the test acts
	stopped := false
	stop := func() string {
		if !stopped {
			stopped = true
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return out.String()
	}
	t.Cleanup(func() { stop() })
	return stop
}
