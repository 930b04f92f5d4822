// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The helpers of the tests that run in the test VM (build tag vmtest,
// scripts/vmtest.sh), shared by test/vm and the packages whose VM tests
// live beside them (internal/flower).

// RequireVM skips outside the test VM: these tests change kernel state
// (modules, netdevsim devices) and need features the host lacks.
func RequireVM(t testing.TB) {
	t.Helper()
	if os.Getenv("SLUICE_IN_VM") != "1" {
		t.Skip("needs the test VM (SLUICE_IN_VM=1): run scripts/vmtest.sh")
	}
}

// Try runs a command and returns its combined output.
func Try(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// Run runs a command and fails the test, quoting the command and its
// output, when it exits non-zero.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := Try(name, args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", Cmdline(name, args), err, out)
	}
	return out
}

// Cmdline is a command as a shell would show it.
func Cmdline(name string, args []string) string {
	return strings.Join(append([]string{name}, args...), " ")
}

// Lab owns the resources of one top-level test. Steps are subtests, and a
// namespace made in one step must outlive it for the next ones, so undo
// actions are registered on the top-level test (Owner), not on the step.
type Lab struct{ Owner *testing.T }

// NewLab is a Lab for t, which must run in the test VM.
func NewLab(t *testing.T) *Lab {
	t.Helper()
	RequireVM(t)
	return &Lab{Owner: t}
}

// Undo registers a best-effort undo command for the end of the whole test;
// a failure is logged, not fatal, since the verdict is already made.
func (l *Lab) Undo(name string, args ...string) {
	l.Owner.Cleanup(func() {
		if out, err := Try(name, args...); err != nil {
			l.Owner.Logf("cleanup %s: %v\n%s", Cmdline(name, args), err, out)
		}
	})
}

var labSeq atomic.Int32

// Netns creates a network namespace with a name unique to this process,
// with lo up, deleted when the whole test ends. Failures are reported on t
// (the current step).
func (l *Lab) Netns(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("sluice-%d-%d", os.Getpid(), labSeq.Add(1))
	Run(t, "ip", "netns", "add", name)
	l.Undo("ip", "netns", "del", name)
	Run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// NSRun runs a command inside a namespace (ip netns exec).
func NSRun(t testing.TB, ns, name string, args ...string) string {
	t.Helper()
	return Run(t, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// Veth joins two namespaces with a veth pair, addresses them (CIDR) and
// brings both ends up.
func Veth(t testing.TB, nsA, devA, addrA, nsB, devB, addrB string) {
	t.Helper()
	Run(t, "ip", "link", "add", devA, "netns", nsA, "type", "veth", "peer", "name", devB, "netns", nsB)
	for _, e := range [][3]string{{nsA, devA, addrA}, {nsB, devB, addrB}} {
		if e[2] != "" {
			Run(t, "ip", "-n", e[0], "addr", "add", e[2], "dev", e[1])
		}
		Run(t, "ip", "-n", e[0], "link", "set", e[1], "up")
	}
}

// Step runs one named step as a subtest and stops the parent test when it
// fails: later steps depend on earlier ones.
func Step(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, f) {
		t.FailNow()
	}
}

// MustContain fails unless out contains every one of want.
func MustContain(t testing.TB, out string, want ...string) {
	t.Helper()
	var missing []string
	for _, w := range want {
		if !strings.Contains(out, w) {
			missing = append(missing, fmt.Sprintf("%q", w))
		}
	}
	if len(missing) > 0 {
		t.Fatalf("output lacks %s:\n%s", strings.Join(missing, ", "), out)
	}
}

// SluiceBin is the binary scripts/vmtest.sh builds before booting the VM
// (the guest has no business compiling under TCG).
func SluiceBin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("SLUICE_BIN")
	if bin == "" {
		t.Fatal("SLUICE_BIN is not set: run the VM tests through scripts/vmtest.sh, which builds bin/sluice")
	}
	return bin
}

// Gateway is a `sluice gateway run` in a namespace.
type Gateway struct {
	Bin, NS, PinDir string
	Daemon          *exec.Cmd   // `ip netns exec` execs sluice: same pid
	logs            *SyncBuffer // the daemon's output, read while it writes
}

// Log returns what the daemon has logged so far.
func (g *Gateway) Log() string { return g.logs.String() }

// StartGateway runs the daemon in ns with the config body (pin-dir is
// added: a bpffs outside /sys, because `ip netns exec` hides /sys/fs/bpf;
// so is api-socket: "" unless the body names a socket).
// It is stopped and detached when the test ends; its log is printed if
// the test failed.
func StartGateway(t *testing.T, l *Lab, ns, config string) *Gateway {
	t.Helper()
	g := &Gateway{Bin: SluiceBin(t), NS: ns}
	bpffs := t.TempDir()
	Run(t, "mount", "-t", "bpf", "bpf", bpffs)
	l.Undo("umount", bpffs)
	g.PinDir = filepath.Join(bpffs, "sluice")
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	head := "pin-dir: " + g.PinDir + "\n"
	if !strings.Contains(config, "api-socket:") {
		head += "api-socket: \"\"\n" // no API unless the test asks for one
	}
	if err := os.WriteFile(cfg, []byte(head+config), 0o600); err != nil {
		t.Fatal(err)
	}
	daemon := exec.Command("ip", "netns", "exec", ns, g.Bin, "gateway", "run", "-f", cfg)
	logs := &SyncBuffer{}
	g.logs = logs
	daemon.Stdout, daemon.Stderr = logs, logs
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	g.Daemon = daemon
	l.Owner.Cleanup(func() {
		Try("ip", "netns", "exec", ns, g.Bin, "gateway", "stop", "--pin-dir", g.PinDir)
		daemon.Process.Kill()
		daemon.Wait()
		if l.Owner.Failed() {
			l.Owner.Logf("daemon log:\n%s", logs.String())
		}
	})
	return g
}

// ExplainUntil runs `gateway explain` until its output satisfies ok (the
// daemon syncs asynchronously), and fails after a minute.
func (g *Gateway) ExplainUntil(t testing.TB, ok func(string) bool, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := Try("ip", append([]string{"netns", "exec", g.NS, g.Bin, "gateway", "explain", "--pin-dir", g.PinDir}, args...)...)
		if ok(out) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("explain %s never gave the expected answer; last:\n%s", strings.Join(args, " "), out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// FreeNetdevsimID picks a netdevsim device ID not in use, so runs and
// tests in the same VM never collide.
func FreeNetdevsimID() int {
	for id := 100 + os.Getpid()%800; ; id++ {
		if _, err := os.Stat(fmt.Sprintf("/sys/bus/netdevsim/devices/netdevsim%d", id)); os.IsNotExist(err) {
			return id
		}
	}
}

// NetdevsimNetdev returns the name of the device's (single) port netdev,
// as seen from ns: sysfs net/ entries are per namespace.
func NetdevsimNetdev(t testing.TB, ns string, id int) string {
	t.Helper()
	dir := filepath.Join(fmt.Sprintf("/sys/bus/netdevsim/devices/netdevsim%d", id), "net")
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := Try("ip", "netns", "exec", ns, "ls", dir)
		if names := strings.Fields(out); err == nil && len(names) == 1 {
			return names[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("netdevsim%d has no single netdev in %s (ls %s: %v)\n%s", id, ns, dir, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
