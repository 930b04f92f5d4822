// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil"
)

// lifecycleStatus is the part of `show gateway --json` these tests read.
type lifecycleStatus struct {
	FastPathOpen bool `json:"fast_path_open"`
	Pins         struct {
		OK      bool   `json:"ok"`
		Repairs uint64 `json:"repairs"`
	} `json:"pins"`
	Mirror struct {
		InSync      bool   `json:"in_sync"`
		State       string `json:"state"`
		LeaseLapses uint64 `json:"lease_lapses"`
	} `json:"mirror"`
}

// TestGatewayLifecycle is the fail-closed promise around starts and stops:
// a start that cannot complete leaves nothing attached or pinned; a second
// daemon on the same pin dir is refused without any effect on the first;
// pins removed under the daemon come back without the program leaving the
// interface; and status never says in sync while the program is closed.
func TestGatewayLifecycle(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces, bpffs and XDP")
	bin := sluiceBin(t)
	dut := "e2e-life-" + strconv.Itoa(os.Getpid())
	run(t, "ip", "netns", "add", dut)
	t.Cleanup(func() { testutil.DeleteIPNetNS(t, dut) })
	for _, c := range [][]string{
		{"link", "add", "lan0", "type", "veth", "peer", "name", "lan0p"},
		{"link", "add", "wan0", "type", "veth", "peer", "name", "wan0p"},
		{"link", "add", "vx0", "type", "vxlan", "id", "42", "dstport", "4789", "dev", "lan0"}, {"link", "set", "vx0", "up"},
		{"addr", "add", "10.0.0.254/24", "dev", "lan0"}, {"addr", "add", "123.0.0.1/16", "dev", "wan0"},
		{"link", "set", "lan0", "up"}, {"link", "set", "lan0p", "up"}, {"link", "set", "wan0", "up"}, {"link", "set", "wan0p", "up"},
		{"neigh", "add", "123.0.0.254", "lladdr", "02:bb:00:00:00:01", "dev", "wan0", "nud", "permanent"},
		{"route", "add", "48.0.0.0/8", "via", "123.0.0.254"},
	} {
		run(t, "ip", append([]string{"-n", dut}, c...)...)
	}
	inNS(t, dut, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	bpffs := t.TempDir()
	run(t, "mount", "-t", "bpf", "bpf", bpffs)
	t.Cleanup(func() { exec.Command("umount", bpffs).Run() })
	pinDir := filepath.Join(bpffs, "sluice")
	tmp := t.TempDir()
	apiSock := filepath.Join(tmp, "sluice.sock")
	config := func(name, extra string) string {
		cfg := filepath.Join(tmp, name)
		os.WriteFile(cfg, []byte(fmt.Sprintf(`lab: true
policy-source: static
pin-dir: %s
lease: 1s
%s
interfaces:
  - name: lan0
    l2: fib
  - name: wan0
    l2: fib
policies:
  - {dir: out, src: 10.0.0.0/8, dst: 48.0.1.0/24, priority: 100, peer: 123.0.0.254, local: 123.0.0.1, reqid: 1, offload: packet, offload-dev: wan0}
`, pinDir, extra)), 0o600)
		return cfg
	}
	xdpProg := func() string { // the program id on lan0, "" when none
		var links []struct {
			XDP *struct {
				Prog struct {
					ID int `json:"id"`
				} `json:"prog"`
			} `json:"xdp"`
		}
		if err := json.Unmarshal([]byte(run(t, "ip", "-n", dut, "-j", "-d", "link", "show", "lan0")), &links); err != nil {
			t.Fatal(err)
		}
		if len(links) == 0 || links[0].XDP == nil {
			return ""
		}
		return strconv.Itoa(links[0].XDP.Prog.ID)
	}
	pins := func() []string {
		entries, _ := os.ReadDir(pinDir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	gatewayRun := func(cfg string) (string, error) {
		c := exec.Command("ip", "netns", "exec", dut, bin, "gateway", "run", "-f", cfg)
		done := make(chan struct{})
		var out []byte
		var err error
		go func() { out, err = c.CombinedOutput(); close(done) }()
		select {
		case <-done:
			return string(out), err
		case <-time.After(20 * time.Second):
			c.Process.Kill()
			<-done
			return string(out), fmt.Errorf("still running after 20s")
		}
	}
	failedStart := func(t *testing.T, cfg, want string) {
		t.Helper()
		out, err := gatewayRun(cfg)
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("gateway run: %v, want a failure naming %q:\n%s", err, want, out)
		}
		if strings.Contains(out, "metrics listening") || strings.Contains(out, "attached") {
			t.Fatalf("the failed start says it listened or attached:\n%s", out)
		}
		if p := xdpProg(); p != "" {
			t.Fatalf("XDP program %s left on lan0 by a failed start:\n%s", p, out)
		}
		if ps := pins(); len(ps) != 0 {
			t.Fatalf("pins left by a failed start: %v", ps)
		}
	}

	t.Run("a metrics address that cannot be bound fails the start with nothing attached", func(t *testing.T) {
		failedStart(t, config("badmetrics.yaml", "metrics-listen: 192.0.2.77:9469"), "metrics-listen 192.0.2.77:9469")
	})
	t.Run("an API socket in a directory that cannot exist fails the start with nothing attached", func(t *testing.T) {
		file := filepath.Join(tmp, "a-file")
		os.WriteFile(file, nil, 0o600)
		failedStart(t, config("badsock.yaml", "api-socket: "+filepath.Join(file, "sub", "s.sock")), "api-socket")
	})

	t.Run("a start that fails after attaching detaches and unpins what it attached", func(t *testing.T) {
		// lan0 attaches; vx0 (vxlan) has no native XDP, so its attach fails.
		cfg := filepath.Join(tmp, "vxlan.yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf("lab: true\npolicy-source: static\npin-dir: %s\ninterfaces:\n  - name: lan0\n    l2: fib\n  - name: vx0\n    l2: fib\n", pinDir)), 0o600)
		out, err := gatewayRun(cfg)
		if err == nil || !strings.Contains(out, "vx0") {
			t.Fatalf("gateway run: %v, want a failure naming vx0:\n%s", err, out)
		}
		if p := xdpProg(); p != "" {
			t.Fatalf("XDP program %s left on lan0:\n%s", p, out)
		}
		if ps := pins(); len(ps) != 0 {
			t.Fatalf("pins left: %v\n%s", ps, out)
		}
	})

	cfg := config("gateway.yaml", "api-socket: "+apiSock)
	var logs bytes.Buffer
	daemon := exec.Command("ip", "netns", "exec", dut, bin, "gateway", "run", "-f", cfg)
	daemon.Stdout, daemon.Stderr = &logs, &logs
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		daemon.Process.Signal(syscall.SIGCONT)
		exec.Command("ip", "netns", "exec", dut, bin, "gateway", "stop", "--pin-dir", pinDir).Run()
		daemon.Process.Kill()
		daemon.Wait()
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	})
	status := func() (lifecycleStatus, error) {
		var s lifecycleStatus
		out, err := exec.Command(bin, "show", "gateway", "--socket", apiSock, "--json").CombinedOutput()
		if err != nil {
			return s, fmt.Errorf("%v: %s", err, out)
		}
		return s, json.Unmarshal(out, &s)
	}
	explain := func() string {
		out, _ := exec.Command("ip", "netns", "exec", dut, bin, "gateway", "explain", "--pin-dir", pinDir, "--iface", "lan0", "src", "10.0.0.1", "dst", "48.0.1.9").CombinedOutput()
		return string(out)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("the daemon in sync", func() bool { s, err := status(); return err == nil && s.Mirror.InSync })
	prog := xdpProg()
	pidFile := "/run/sluice/gateway-" // per pin dir; find ours by content
	daemonPID := func() string {
		matches, _ := filepath.Glob(pidFile + "*.pid")
		for _, m := range matches {
			b, _ := os.ReadFile(m)
			if pid := strings.TrimSpace(string(b)); pid != "" && isChildOf(pid, daemon.Process.Pid) {
				return pid
			}
		}
		return ""
	}
	pid := daemonPID()
	if prog == "" || pid == "" {
		t.Fatalf("running daemon: XDP program %q, pid file names %q", prog, pid)
	}

	t.Run("a second daemon on the same pin dir is refused and changes nothing", func(t *testing.T) {
		out, err := gatewayRun(cfg)
		if err == nil || !strings.Contains(out, "pid "+pid) || !strings.Contains(out, "pin-dir") {
			t.Fatalf("second gateway run: %v, want a refusal naming pid %s:\n%s", err, pid, out)
		}
		if strings.Contains(out, "attached") {
			t.Fatalf("the refused daemon attached:\n%s", out)
		}
		if p := xdpProg(); p != prog {
			t.Fatalf("XDP program on lan0 changed from %s to %s", prog, p)
		}
		if p := daemonPID(); p != pid {
			t.Fatalf("the pid file now says %q, want %s", p, pid)
		}
		s, err := status()
		if err != nil || !s.Mirror.InSync || !s.FastPathOpen {
			t.Fatalf("first daemon after the refused start: %+v %v", s, err)
		}
		if out := explain(); !strings.Contains(out, "forward-out") {
			t.Fatalf("the first daemon's fast path no longer forwards:\n%s", out)
		}
	})

	t.Run("pins removed under the daemon are restored and the program stays attached", func(t *testing.T) {
		if err := os.RemoveAll(pinDir); err != nil {
			t.Fatal(err)
		}
		if p := xdpProg(); p != prog {
			t.Fatalf("removing the pins detached the program (lan0 has %q, had %s)", p, prog)
		}
		waitFor("pins restored", func() bool { s, err := status(); return err == nil && s.Pins.OK && s.Pins.Repairs > 0 })
		if !strings.Contains(strings.Join(pins(), " "), "link_lan0") {
			t.Fatalf("pins after repair: %v", pins())
		}
		if out := explain(); !strings.Contains(out, "forward-out") {
			t.Fatalf("explain over the restored pins:\n%s", out)
		}
		if !strings.Contains(logs.String(), "pins removed under the running daemon") {
			t.Fatal("the removal was not logged")
		}
	})

	t.Run("status never says in sync while the program is closed (SIGSTOP past the lease)", func(t *testing.T) {
		daemon.Process.Signal(syscall.SIGSTOP)
		waitFor("the lease to close the program", func() bool { return strings.Contains(explain(), "not-ready") })
		daemon.Process.Signal(syscall.SIGCONT)
		for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
			s, err := status()
			if err != nil {
				continue
			}
			if s.Mirror.InSync && !s.FastPathOpen {
				t.Fatalf("status says in sync while the program is closed: %+v", s)
			}
		}
		waitFor("in sync again", func() bool { s, err := status(); return err == nil && s.Mirror.InSync && s.FastPathOpen })
		if out := explain(); !strings.Contains(out, "forward-out") {
			t.Fatalf("after SIGCONT:\n%s", out)
		}
	})

	t.Run("stop waits for the daemon, then detaches", func(t *testing.T) {
		out := inNS(t, dut, bin, "gateway", "stop", "--pin-dir", pinDir)
		if !strings.Contains(out, "detached from lan0") {
			t.Fatalf("stop said:\n%s", out)
		}
		if p := xdpProg(); p != "" {
			t.Fatalf("lan0 still has XDP program %s", p)
		}
		if p := daemonPID(); p != "" {
			t.Fatalf("the pid file of the stopped daemon is still there (%s)", p)
		}
	})
}

// isChildOf reports whether pid is ppid or a child of it (`ip netns exec`
// execs the daemon in place, but be lenient).
func isChildOf(pid string, ppid int) bool {
	if pid == strconv.Itoa(ppid) {
		return true
	}
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 3 && f[3] == strconv.Itoa(ppid)
}
