// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// NewNetNS gives each call its own named namespace, and the cleanup removes
// it: a leaked namespace would collide with the next run's and pile up
// under /run/netns.
func TestNewNetNSCleansUp(t *testing.T) {
	var names []string
	t.Run("make", func(t *testing.T) {
		a, ha := NewNetNS(t)
		b, _ := NewNetNS(t)
		if a == b || !ha.IsOpen() {
			t.Fatalf("two namespaces %q %q (open %v)", a, b, ha.IsOpen())
		}
		out, err := exec.Command("ip", "-n", a, "link", "show", "lo").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "lo:") {
			t.Fatalf("ip -n %s: %v\n%s", a, err, out)
		}
		names = []string{a, b}
	})
	for _, n := range names {
		if _, err := os.Stat("/run/netns/" + n); !os.IsNotExist(err) {
			t.Errorf("namespace %s still exists after its test: %v", n, err)
		}
	}
}
