// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"sluice/internal/testutil"
)

// --direction on real iperf3 between two namespaces: forward and reverse
// give one value per run, in the direction asked, with the matching
// iperf3 flags; an unknown direction is refused with the choices.
func TestIperf3Direction(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces")
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skip("iperf3 is not installed (make setup installs it)")
	}
	c, _ := testutil.NewNetNS(t)
	s, _ := testutil.NewNetNS(t)
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	sh("ip", "-n", c, "link", "add", "name", "ip3a", "type", "veth", "peer", "name", "ip3b", "netns", s)
	sh("ip", "-n", c, "addr", "add", "10.77.0.1/24", "dev", "ip3a")
	sh("ip", "-n", s, "addr", "add", "10.77.0.2/24", "dev", "ip3b")
	sh("ip", "-n", c, "link", "set", "ip3a", "up")
	sh("ip", "-n", s, "link", "set", "ip3b", "up")

	for _, dir := range []string{DirForward, DirReverse} {
		res, err := RunIperf3(context.Background(), IperfOptions{Endpoints: Endpoints{Target: "10.77.0.2", ClientNS: c, ServerNS: s},
			Runs: 2, Parallel: 1, Seconds: 1, Direction: dir})
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if res.N != 2 || res.Direction != dir || res.MeanBPS <= 0 {
			t.Errorf("%s: %d values, direction %q, mean %g: want 2 values of one direction", dir, res.N, res.Direction, res.MeanBPS)
		}
		for _, r := range res.Runs {
			measured, other := r.ForwardBPS, r.ReverseBPS
			if dir == DirReverse {
				measured, other = other, measured
			}
			if measured <= 0 || other != 0 {
				t.Errorf("%s run %+v: the rate is not in the direction asked", dir, r)
			}
		}
		hasRev, hasBidi := strings.Contains(res.Command, "--reverse"), strings.Contains(res.Command, "--bidi")
		if hasBidi || hasRev != (dir == DirReverse) {
			t.Errorf("%s: command %q", dir, res.Command)
		}
	}
	_, err := RunIperf3(context.Background(), IperfOptions{Endpoints: Endpoints{Target: "10.77.0.2"}, Runs: 2, Parallel: 1, Seconds: 1, Direction: "up"})
	if err == nil || !strings.Contains(err.Error(), `--direction "up": use forward (client to server), reverse (server to client) or bidi`) {
		t.Errorf("bad direction: %v", err)
	}
}
