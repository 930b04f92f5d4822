// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"os/exec"
	"strings"
	"testing"
)

// ipn runs `ip -n ns args...` and fails the test with ip's own words.
func ipn(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip -n %s %s: %v\n%s", ns, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ipBatch feeds lines to `ip -n ns -batch -`.
func ipBatch(t testing.TB, ns string, lines []string) {
	t.Helper()
	cmd := exec.Command("ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s -batch: %v\n%s", ns, err, out)
	}
}

// nlAttr builds one netlink attribute, for tests that extend kernel bytes.
func nlAttr(typ uint16, v []byte) []byte { return putAttr(nil, typ, v) }
