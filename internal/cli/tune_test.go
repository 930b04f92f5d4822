// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"strings"
	"testing"
)

// tune check and plan against the seed host's fixture tree: THP differs
// (the tree has no THP files), the IRQs are pinned as the profile says.
func TestTuneCheckAndPlanOnFixture(t *testing.T) {
	prof := "../tune/testdata/seed004.yaml"
	out, err := runCLI(t, "tune", "check", "-f", prof, "--sysroot", cx7Root)
	if ExitCode(err) != ExitCheckFailed || !strings.Contains(out, "[DRIFT] thp enabled: live (unreadable), want never") || strings.Contains(out, "affinity") {
		t.Errorf("check: err %v\n%s", err, out)
	}
	out, err = runCLI(t, "tune", "plan", "-f", prof, "--sysroot", cx7Root)
	if err != nil || !strings.Contains(out, "echo never > /sys/kernel/mm/transparent_hugepage/enabled") {
		t.Errorf("plan: err %v\n%s", err, out)
	}
	if _, err := runCLI(t, "tune", "check"); err == nil || !strings.Contains(err.Error(), "-f tune.yaml is required") {
		t.Errorf("no -f: %v", err)
	}
}
