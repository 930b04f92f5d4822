// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"strings"
	"testing"
)

// Every command follows one table of exit codes: cobra's own errors and the
// flag checks inside a command are usage errors (2), distinct from a failure
// (1) and from a check that found a difference (3).
func TestExitCodes(t *testing.T) {
	prof := "../tune/testdata/seed004.yaml"
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"mtu"}, ExitOK},
		{[]string{"nosuch"}, ExitUsage},
		{[]string{"mtu", "--nosuch"}, ExitUsage},
		{[]string{"mtu", "--check", "abc"}, ExitUsage},
		{[]string{"mtu", "extra-argument"}, ExitUsage},
		{[]string{"mtu", "--underlay", "10"}, ExitUsage},
		{[]string{"tune", "check"}, ExitUsage},
		{[]string{"lab", "up", "nosuch"}, ExitUsage},
		{[]string{"swan", "gen", "--topology", "x", "--role", "gw0", "-o", t.TempDir()}, ExitUsage},
		{[]string{"tune", "check", "-f", "/nonexistent/tune.yaml"}, ExitFailure},
		{[]string{"tune", "check", "-f", prof, "--sysroot", cx7Root}, ExitCheckFailed},
	} {
		out, err := runCLI(t, tc.args...)
		if got := ExitCode(err); got != tc.want {
			t.Errorf("sluice %s: exit %d, want %d (%v)\n%s", strings.Join(tc.args, " "), got, tc.want, err, out)
		}
		if tc.want == ExitUsage && !strings.Contains(err.Error(), "--help") && !strings.Contains(err.Error(), "use ") {
			t.Errorf("sluice %s: a usage error says what to do: %v", strings.Join(tc.args, " "), err)
		}
	}
	out, err := runCLI(t, "--help")
	if err != nil || !strings.Contains(out, "Exit codes:") || !strings.Contains(out, "2  usage error") || !strings.Contains(out, "3  check failed") {
		t.Errorf("sluice --help has no exit code table:\n%s", out)
	}
}
