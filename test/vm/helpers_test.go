//go:build vmtest

package vm

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// requireVM skips outside the test VM: these tests change kernel state
// (modules, netdevsim devices) and need features the host lacks.
func requireVM(t *testing.T) {
	t.Helper()
	if os.Getenv("SLUICE_IN_VM") != "1" {
		t.Skip("needs the test VM (SLUICE_IN_VM=1): run scripts/vmtest.sh")
	}
}

// try runs a command and returns its combined output.
func try(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// run runs a command and fails the test, quoting the command and its
// output, when it exits non-zero.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := try(name, args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmdline(name, args), err, out)
	}
	return out
}

func cmdline(name string, args []string) string {
	return strings.Join(append([]string{name}, args...), " ")
}

// lab owns the resources of one top-level test. Steps are subtests, and a
// namespace made in one step must outlive it for the next ones, so undo
// actions are registered on the top-level test, not on the step.
type lab struct{ owner *testing.T }

func newLab(t *testing.T) *lab {
	t.Helper()
	requireVM(t)
	return &lab{owner: t}
}

// undo registers a best-effort undo command for the end of the whole test;
// a failure is logged, not fatal, since the verdict is already made.
func (l *lab) undo(name string, args ...string) {
	l.owner.Cleanup(func() {
		if out, err := try(name, args...); err != nil {
			l.owner.Logf("cleanup %s: %v\n%s", cmdline(name, args), err, out)
		}
	})
}

var seq atomic.Int32

// netns creates a network namespace with a name unique to this process,
// with lo up, deleted when the whole test ends. Failures are reported on t
// (the current step).
func (l *lab) netns(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("sluice-%d-%d", os.Getpid(), seq.Add(1))
	run(t, "ip", "netns", "add", name)
	l.undo("ip", "netns", "del", name)
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// nsRun runs a command inside a namespace (ip netns exec).
func nsRun(t *testing.T, ns, name string, args ...string) string {
	t.Helper()
	return run(t, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// veth joins two namespaces with a veth pair, addresses them (CIDR) and
// brings both ends up.
func veth(t *testing.T, nsA, devA, addrA, nsB, devB, addrB string) {
	t.Helper()
	run(t, "ip", "link", "add", devA, "netns", nsA, "type", "veth", "peer", "name", devB, "netns", nsB)
	for _, e := range [][3]string{{nsA, devA, addrA}, {nsB, devB, addrB}} {
		if e[2] != "" {
			run(t, "ip", "-n", e[0], "addr", "add", e[2], "dev", e[1])
		}
		run(t, "ip", "-n", e[0], "link", "set", e[1], "up")
	}
}

// step runs one named step as a subtest and stops the parent test when it
// fails: later steps depend on earlier ones.
func step(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, f) {
		t.FailNow()
	}
}

var (
	lifetimeRe = regexp.MustCompile(`(\d+)\(bytes\), (\d+)\(packets\)`)
	failedRe   = regexp.MustCompile(`replay-window \d+ replay \d+ failed (\d+)`)
)

// saStats returns the packets counted and the integrity failures of one
// SA, from `ip -s xfrm state get`.
func saStats(t *testing.T, ns, src, dst, spi string) (packets, failed int, out string) {
	t.Helper()
	out = run(t, "ip", "-n", ns, "-s", "xfrm", "state", "get", "src", src, "dst", dst, "proto", "esp", "spi", spi)
	m := lifetimeRe.FindStringSubmatch(out)
	f := failedRe.FindStringSubmatch(out)
	if m == nil || f == nil {
		t.Fatalf("cannot find the lifetime/stats counters in:\n%s", out)
	}
	packets, _ = strconv.Atoi(m[2])
	failed, _ = strconv.Atoi(f[1])
	return packets, failed, out
}
