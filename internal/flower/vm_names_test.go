// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"net"
	"os/exec"
	"regexp"
	"testing"

	"sluice/internal/testutil"
)

// The VM tests of the flower tier (moved here from test/vm) call the shared
// VM helpers of internal/testutil by the short names they had there.

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	return testutil.Run(t, name, args...)
}

func try(name string, args ...string) (string, error) { return testutil.Try(name, args...) }

type lab struct {
	*testutil.Lab
	owner *testing.T
}

func newLab(t *testing.T) *lab {
	t.Helper()
	return &lab{testutil.NewLab(t), t}
}

func (l *lab) netns(t *testing.T) string { t.Helper(); return l.Netns(t) }

func nsRun(t *testing.T, ns, name string, args ...string) string {
	t.Helper()
	return testutil.NSRun(t, ns, name, args...)
}

func veth(t *testing.T, nsA, devA, addrA, nsB, devB, addrB string) {
	t.Helper()
	testutil.Veth(t, nsA, devA, addrA, nsB, devB, addrB)
}

func step(t *testing.T, name string, f func(t *testing.T)) { t.Helper(); testutil.Step(t, name, f) }

func mustContain(t *testing.T, out string, want ...string) {
	t.Helper()
	testutil.MustContain(t, out, want...)
}

func inNetns(t *testing.T, ns string, f func()) { t.Helper(); testutil.InNetns(t, ns, f) }

func link(t *testing.T, ns, dev string) (int, net.HardwareAddr) {
	t.Helper()
	return testutil.Link(t, ns, dev)
}

func freeNetdevsimID() int { return testutil.FreeNetdevsimID() }

func netdevsimNetdev(t *testing.T, ns string, id int) string {
	t.Helper()
	return testutil.NetdevsimNetdev(t, ns, id)
}

// gateway is a `sluice gateway run` in a namespace (testutil.Gateway).
type gateway struct {
	*testutil.Gateway
	bin, ns, pinDir string
	daemon          *exec.Cmd
}

func startGateway(t *testing.T, l *lab, ns, config string) *gateway {
	t.Helper()
	g := testutil.StartGateway(t, l.Lab, ns, config)
	return &gateway{g, g.Bin, g.NS, g.PinDir, g.Daemon}
}

var sentPktRe = regexp.MustCompile(`Sent \d+ bytes (\d+) pkt`)
