// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"log/slog"
	"strings"
	"testing"

	"sluice/internal/api"
	"sluice/internal/config"
	"sluice/internal/testutil"
)

// The kernel package reports what is missing; the daemon adds what to
// type about it. In a namespace with one interface (v0, 10.77.0.1/24):
// a hairpin next hop with no neighbour entry, one with no route, an
// unknown interface.
func TestGatewayHostErrorsCarryTheFix(t *testing.T) {
	ns, _ := testutil.NewNetNS(t)
	testutil.IP(t, ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	testutil.IP(t, ns, "addr", "add", "10.77.0.1/24", "dev", "v0")
	testutil.IP(t, ns, "link", "set", "v0", "up")
	testutil.IP(t, ns, "link", "set", "v1", "up")
	hairpin := "interfaces:\n  - name: v0\n    inbound: forward\n    wan-antispoof: upstream\n    hairpin-to-nexthop: "
	for _, tc := range []struct{ yaml, want string }{
		{hairpin + "10.77.0.9\n", "gw.yaml:2: interfaces[0] (v0) hairpin-to-nexthop: no neighbour entry for 10.77.0.9 on v0; ping it or add a permanent neighbour (`ip neigh replace 10.77.0.9 lladdr MAC dev v0 nud permanent`)"},
		{hairpin + "203.0.113.1\n", "hairpin-to-nexthop: no route to 203.0.113.1 (network is unreachable): add one, e.g. `ip route add 203.0.113.1 via GATEWAY`"},
		{"interfaces:\n  - name: v0\n  - name: nosuch0\n", "gw.yaml:3: interfaces[1].name: interface \"nosuch0\": Link not found (check the name with `ip link`)"},
	} {
		g, err := config.ParseGateway([]byte(tc.yaml), "gw.yaml")
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		testutil.InNetns(t, ns, func() {
			if _, err := FromConfig(g, api.Build{}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q: %v\nwant %q", tc.yaml, err, tc.want)
			}
		})
	}
}

// A CPU the host does not have: sched_setaffinity fails (EINVAL) without
// changing this process, and the error names the setting and the fix.
func TestDaemonSettingsErrorCarriesTheFix(t *testing.T) {
	g := &config.Gateway{File: "gw.yaml"}
	g.Daemon.CPUs, g.Daemon.CPUList = []int{1023}, "1023"
	err := ApplyDaemonSettings(g, slog.New(slog.DiscardHandler))
	want := "gw.yaml: daemon-cpu: sched_setaffinity([1023]): invalid argument (are those CPUs online and in this cgroup's cpuset?)"
	if err == nil || err.Error() != want {
		t.Fatalf("%v\nwant %s", err, want)
	}
}
