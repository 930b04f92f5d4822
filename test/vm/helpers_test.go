// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"net"
	"regexp"
	"strconv"
	"testing"

	"sluice/internal/testutil"
)

// The shared VM-test helpers live in internal/testutil; these are their
// names in this package.

func requireVM(t *testing.T)                          { testutil.RequireVM(t) }
func try(name string, args ...string) (string, error) { return testutil.Try(name, args...) }
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	return testutil.Run(t, name, args...)
}
func cmdline(name string, args []string) string { return testutil.Cmdline(name, args) }

// lab owns the resources of one top-level test (testutil.Lab); owner is
// the top-level test.
type lab struct {
	*testutil.Lab
	owner *testing.T
}

func newLab(t *testing.T) *lab {
	t.Helper()
	return &lab{testutil.NewLab(t), t}
}

func (l *lab) undo(name string, args ...string) { l.Undo(name, args...) }
func (l *lab) netns(t *testing.T) string        { t.Helper(); return l.Netns(t) }

func nsRun(t *testing.T, ns, name string, args ...string) string {
	t.Helper()
	return testutil.NSRun(t, ns, name, args...)
}

func veth(t *testing.T, nsA, devA, addrA, nsB, devB, addrB string) {
	t.Helper()
	testutil.Veth(t, nsA, devA, addrA, nsB, devB, addrB)
}

func step(t *testing.T, name string, f func(t *testing.T)) { t.Helper(); testutil.Step(t, name, f) }

func inNetns(t *testing.T, ns string, f func()) { t.Helper(); testutil.InNetns(t, ns, f) }

func link(t *testing.T, ns, dev string) (int, net.HardwareAddr) {
	t.Helper()
	return testutil.Link(t, ns, dev)
}

var (
	lifetimeRe = regexp.MustCompile(`(\d+)\(bytes\), (\d+)\(packets\)`)
	failedRe   = regexp.MustCompile(`replay-window \d+ replay \d+ failed (\d+)`)
)

// saStats returns the packets counted and the integrity failures of one
// SA, from `ip -s xfrm state get`.
func saStats(t *testing.T, ns, src, dst, spi string) (packets, failed int, out string) {
	t.Helper()
	out = run(t, "ip", "-n", ns, "-s", "xfrm", "state", "get", "src", src, "dst", dst, "proto", "esp", "spi", spi)
	m := lifetimeRe.FindStringSubmatch(out)
	f := failedRe.FindStringSubmatch(out)
	if m == nil || f == nil {
		t.Fatalf("cannot find the lifetime/stats counters in:\n%s", out)
	}
	packets, _ = strconv.Atoi(m[2])
	failed, _ = strconv.Atoi(f[1])
	return packets, failed, out
}
