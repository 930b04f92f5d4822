// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"sluice/internal/config"
	"sluice/internal/testutil"
)

// Two gateways on different pin dirs have different pid files, and stop
// signals only a process that is a 'gateway run': a stale pid file naming
// some other process (here a sleep) leaves it alone.
func TestGatewayStopSignalsOnlyItsOwnDaemon(t *testing.T) {
	if PIDFile(config.DefaultPinDir) != "/run/sluice/gateway.pid" {
		t.Errorf("default pid file moved: %s", PIDFile(config.DefaultPinDir))
	}
	a, b := PIDFile("/run/sluice/lab/x/bpf/gw-dut"), PIDFile("/run/sluice/lab/y/bpf/gw-dut")
	if a == b || a == PIDFile(config.DefaultPinDir) {
		t.Fatalf("pid files collide: %s, %s", a, b)
	}
	testutil.RequireRoot(t, "writes /run/sluice")
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	pinDir := t.TempDir() // no pins: stop only looks at the pid file
	pidFile := PIDFile(pinDir)
	// A fresh machine has no /run/sluice until a daemon made one.
	if err := os.MkdirAll(filepath.Dir(pidFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(sleeper.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(pidFile)
	var sb strings.Builder
	err := Stop(pinDir, &sb, &sb)
	out := sb.String()
	if err != nil || strings.Contains(out, "signalled") {
		t.Fatalf("stop with a stale pid file: %v\n%s", err, out)
	}
	if err := sleeper.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("stop signalled a process that is not a gateway: %v", err)
	}
	if isGatewayRun(os.Getpid()) {
		t.Errorf("the test binary is taken for a gateway")
	}
}
