// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"sluice/internal/testutil"
)

// TestFIBUsesL4 in a namespace of its own: a plain FIB ignores ports; a
// rule on a destination port, or a multipath hash on ports, does not.
func TestFIBUsesL4(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces")
	ns, err := NewNetns(func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	check := func(want bool, wantWhy string) {
		t.Helper()
		var got bool
		var why string
		if err := InNetns(ns, func() error { got, why = FIBUsesL4(); return nil }); err != nil {
			t.Fatal(err)
		}
		if got != want || !strings.Contains(why, wantWhy) {
			t.Errorf("FIBUsesL4() = %v, %q; want %v, %q", got, why, want, wantWhy)
		}
	}
	in := func(args ...string) { t.Helper(); runInNetns(t, ns, args...) }
	check(false, "")
	in("ip", "rule", "add", "priority", "100", "ipproto", "udp", "dport", "53", "lookup", "100")
	check(true, "policy rule priority 100")
	in("ip", "rule", "del", "priority", "100")
	check(false, "")
	in("sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1")
	check(true, "net.ipv4.fib_multipath_hash_policy is 1")
	in("sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=2")
	check(false, "")
}

// runInNetns runs a command inside the namespace and fails the test, with
// its output, if it fails.
func runInNetns(t *testing.T, ns netns.NsHandle, args ...string) {
	t.Helper()
	if err := InNetns(ns, func() error {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
