// SPDX-License-Identifier: Apache-2.0

package guard

import (
	"os/exec"
	"testing"
)

// TestSourceFilesHaveSPDX: every source file carries the SPDX line its
// path calls for (scripts/spdx.sh holds the rules; README, License). Other
// engineers add files all the time: this is what tells them to run it.
func TestSourceFilesHaveSPDX(t *testing.T) {
	cmd := exec.Command("bash", "scripts/spdx.sh", "--check")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s\nrun scripts/spdx.sh and commit what it changed", err, out)
	}
}
