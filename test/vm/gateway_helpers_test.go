//go:build vmtest

package vm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sluiceBin is the binary scripts/vmtest.sh builds before booting the VM
// (the guest has no business compiling under TCG).
func sluiceBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("SLUICE_BIN")
	if bin == "" {
		t.Fatal("SLUICE_BIN is not set: run the VM tests through scripts/vmtest.sh, which builds bin/sluice")
	}
	return bin
}

// gateway is a `sluice gateway run` in a namespace.
type gateway struct {
	bin, ns, pinDir string
	daemon          *exec.Cmd // `ip netns exec` execs sluice: same pid
}

// startGateway runs the daemon in ns with the config body (pin-dir is
// added: a bpffs outside /sys, because `ip netns exec` hides /sys/fs/bpf;
// so is api-socket: "" unless the body names a socket).
// It is stopped and detached when the test ends; its log is printed if
// the test failed.
func startGateway(t *testing.T, l *lab, ns, config string) *gateway {
	t.Helper()
	g := &gateway{bin: sluiceBin(t), ns: ns}
	bpffs := t.TempDir()
	run(t, "mount", "-t", "bpf", "bpf", bpffs)
	l.undo("umount", bpffs)
	g.pinDir = filepath.Join(bpffs, "sluice")
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	head := "pin-dir: " + g.pinDir + "\n"
	if !strings.Contains(config, "api-socket:") {
		head += "api-socket: \"\"\n" // no API unless the test asks for one
	}
	if err := os.WriteFile(cfg, []byte(head+config), 0o600); err != nil {
		t.Fatal(err)
	}
	daemon := exec.Command("ip", "netns", "exec", ns, g.bin, "gateway", "run", "-f", cfg)
	var logs bytes.Buffer
	daemon.Stdout, daemon.Stderr = &logs, &logs
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	g.daemon = daemon
	l.owner.Cleanup(func() {
		try("ip", "netns", "exec", ns, g.bin, "gateway", "stop", "--pin-dir", g.pinDir)
		daemon.Process.Kill()
		daemon.Wait()
		if l.owner.Failed() {
			l.owner.Logf("daemon log:\n%s", logs.String())
		}
	})
	return g
}

// explainUntil runs `gateway explain` until its output satisfies ok (the
// daemon syncs asynchronously), and fails after a minute.
func (g *gateway) explainUntil(t *testing.T, ok func(string) bool, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := try("ip", append([]string{"netns", "exec", g.ns, g.bin, "gateway", "explain", "--pin-dir", g.pinDir}, args...)...)
		if ok(out) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("explain %s never gave the expected answer; last:\n%s", strings.Join(args, " "), out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// captureWire runs tcpdump on dev in ns while traffic() runs and returns
// what it printed (up to count packets, or what came in 20 s).
func captureWire(t *testing.T, ns, dev, filter string, count int, traffic func()) string {
	t.Helper()
	capture := exec.Command("ip", "netns", "exec", ns, "tcpdump", "-n", "-e", "-l", "-c", strconv.Itoa(count), "-i", dev, filter)
	var out bytes.Buffer
	capture.Stdout, capture.Stderr = &out, &out
	if err := capture.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // tcpdump under TCG is slow to start
	traffic()
	done := make(chan error, 1)
	go func() { done <- capture.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		capture.Process.Kill()
		<-done
	}
	return out.String()
}
