// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// TestGatherStrongSwanVersion: the version comes from the strongSwan
// installed here (charon over VICI when it runs, else swanctl, which exits
// 2 without a daemon but still prints it), and agrees with dpkg's.
func TestGatherStrongSwanVersion(t *testing.T) {
	if _, err := exec.LookPath("swanctl"); err != nil {
		t.Fatal("swanctl is not installed: run 'make setup'")
	}
	f := &Facts{}
	gatherStrongSwan(f)
	out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", "strongswan-swanctl").Output()
	if err != nil {
		t.Fatalf("dpkg-query: %v", err)
	}
	if f.StrongSwan == "" || !strings.HasPrefix(string(out), f.StrongSwan) {
		t.Fatalf("gathered %q (errors %v), the package is %s", f.StrongSwan, f.Errors, out)
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]string{"5.9.8": "[5 9 8]", "6.0.2dr1": "[6 0 2]", "6.0": "[6 0 0]", "x": "[]"} {
		if got := fmt.Sprint(parseVersion(in)); got != want {
			t.Errorf("parseVersion(%q) = %s, want %s", in, got, want)
		}
	}
}
