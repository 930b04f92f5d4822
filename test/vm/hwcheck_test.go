// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"sluice/internal/hwcheck"
	"sluice/internal/testutil"
)

// TestHWCheckOnModel runs the hardware acceptance command (sluice
// hwcheck) on two NIC model ports cabled together, compared with the
// mlx5-6.12 profile, while the module runs each mlx5 profile: under
// mlx5-6.12 every row that runs is "model = hardware"; under
// mlx5-upstream the port matches subnets, so the subnet row differs and
// the command exits 3. The rows come from the wire (a capture on the
// peer), so a command that read the profile instead of measuring could
// not pass both.
func TestHWCheckOnModel(t *testing.T) {
	l := newLab(t)
	for _, running := range nmProfiles {
		t.Run("module "+running, func(t *testing.T) {
			testutil.UseNicmodelProfile(t, running)
			ns := l.netns(t)
			testutil.NicPair(t, ns, "hwa", ns, "hwb")
			out, code := hwcheckRun(t, ns, "--port", "hwa", "--peer", "hwb", "--profile", testutil.ProfileMlx5_612, "--json")
			var rep hwcheck.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("hwcheck --json: %v\n%s", err, out)
			}
			want := map[string]hwcheck.Verdict{
				"subnet-selector": hwcheck.Same, "sa-deleted-under-xdp": hwcheck.Same, "xdp-xmit-encrypted": hwcheck.Same,
				"non-esn-replay": hwcheck.Same, "carried-oseq": hwcheck.Same, "bond-failover": hwcheck.NotRun,
			}
			wantCode := 0
			if running == testutil.ProfileMlx5Upstream {
				want["subnet-selector"], wantCode = hwcheck.Differs, 3
			}
			for _, r := range rep.Rows {
				t.Logf("%s: %s (expected %q, measured %q) %s %s", r.Scenario, r.Verdict, r.Expected, r.Measured, r.Why, r.Evidence)
				if r.Verdict != want[r.Scenario] {
					t.Errorf("module %s, --profile mlx5-6.12: %s is %q, want %q", running, r.Scenario, r.Verdict, want[r.Scenario])
				}
				delete(want, r.Scenario)
			}
			if len(want) > 0 {
				t.Errorf("rows missing: %v", want)
			}
			if code != wantCode {
				t.Errorf("exit status %d, want %d", code, wantCode)
			}
			// The ports are back, as they were: up, no address, no XDP.
			for _, p := range []string{"hwa", "hwb"} {
				if got := nsRun(t, ns, "ip", "-o", "link", "show", p); !strings.Contains(got, ",UP") || strings.Contains(got, "xdp") {
					t.Errorf("%s after the run: %s, want up and without XDP", p, got)
				}
				if got := nsRun(t, ns, "ip", "-o", "-4", "addr", "show", p); got != "" {
					t.Errorf("%s after the run has addresses: %s", p, got)
				}
			}
		})
	}
}

// hwcheckRun runs sluice hwcheck in ns; stdout and the exit status.
func hwcheckRun(t *testing.T, ns string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, sluiceBin(t), "hwcheck"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("hwcheck stderr:\n%s", stderr.String())
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("hwcheck: %v", err)
	}
	return string(out), 0
}
