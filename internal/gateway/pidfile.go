// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"sluice/internal/config"
)

// PIDFile is where 'gateway run' with pinDir records its pid for
// 'gateway stop --pin-dir': one file per pin dir, so that stopping one
// gateway (a lab's, another namespace's) never signals another.
func PIDFile(pinDir string) string {
	if filepath.Clean(pinDir) == filepath.Clean(config.DefaultPinDir) {
		return "/run/sluice/gateway.pid"
	}
	sum := sha256.Sum256([]byte(filepath.Clean(pinDir)))
	return fmt.Sprintf("/run/sluice/gateway-%x.pid", sum[:6])
}

func readPIDFile(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil && pid > 0
}

// isGatewayRun reports whether pid is a 'sluice ... gateway run': a stale
// pid file must not make stop signal whatever process reused the pid.
func isGatewayRun(pid int) bool { return isGatewayCmd(pid, "run") }

// isGatewayCmd reports whether pid runs 'sluice ... gateway <sub>'.
func isGatewayCmd(pid int, sub string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "gateway" && args[i+1] == sub {
			return true
		}
	}
	return false
}

// commName is pid's command name, for messages.
func commName(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "unknown command"
	}
	return strings.TrimSpace(string(b))
}

func writePIDFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
}

// removePIDFile removes path if it still names this process.
func removePIDFile(path string) {
	b, err := os.ReadFile(path)
	if err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(os.Getpid()) {
		os.Remove(path)
	}
}
