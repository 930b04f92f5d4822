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

// TestFIBByDestination in a namespace of its own: the default rules and
// single-path routes answer by destination; any other rule, or a route with
// several next hops, does not.
func TestFIBByDestination(t *testing.T) {
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
		if err := InNetns(ns, func() error { got, why = FIBByDestination(); return nil }); err != nil {
			t.Fatal(err)
		}
		if got != want || !strings.Contains(why, wantWhy) {
			t.Errorf("FIBByDestination() = %v, %q; want %v, %q", got, why, want, wantWhy)
		}
	}
	in := func(args ...string) { t.Helper(); runInNetns(t, ns, args...) }
	in("ip", "link", "add", "d0", "type", "veth", "peer", "name", "d0p")
	in("ip", "link", "add", "d1", "type", "veth", "peer", "name", "d1p")
	in("ip", "link", "set", "d0", "up")
	in("ip", "link", "set", "d1", "up")
	in("ip", "addr", "add", "10.1.0.1/24", "dev", "d0")
	in("ip", "addr", "add", "10.2.0.1/24", "dev", "d1")
	in("ip", "route", "add", "192.0.2.0/24", "via", "10.1.0.2")
	check(true, "")
	in("ip", "rule", "add", "priority", "100", "from", "10.0.0.0/8", "lookup", "100")
	check(false, "policy rule priority 100")
	in("ip", "rule", "del", "priority", "100")
	check(true, "")
	in("ip", "rule", "add", "priority", "200", "fwmark", "1", "lookup", "main")
	check(false, "policy rule priority 200")
	in("ip", "rule", "del", "priority", "200")
	in("ip", "route", "add", "198.51.100.0/24", "table", "7", "nexthop", "via", "10.1.0.2", "nexthop", "via", "10.2.0.2")
	check(false, "has 2 next hops")
	in("ip", "route", "del", "198.51.100.0/24", "table", "7")
	check(true, "")
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
