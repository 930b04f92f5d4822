// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"sluice/internal/fastpath"
	"sluice/internal/kernel"
	"sluice/internal/testutil"
)

// TestLeakOnSAMissFailsClosed: an interface whose driver cannot be read
// (no such device; loopback answers no `ethtool -i`) takes the strict SA
// check, as it takes exact selector matching: the gateway cannot prove
// that its device drops what no SA serves.
func TestLeakOnSAMissFailsClosed(t *testing.T) {
	for _, name := range []string{"sluice-none0", "lo"} {
		iface, driver := leakOnSAMiss([]Iface{{Name: name}})
		if iface != name || !strings.HasPrefix(driver, "unknown (ethtool -i "+name) {
			t.Errorf("%s: leakOnSAMiss = %q, %q; want %s with an unknown driver", name, iface, driver, name)
		}
	}
}

// TestDeviceQuirksReachThePort: the kernel offloads policies to the port,
// never to the VLAN or macvlan on it, and the fast path looks quirks up
// by the policy's offload device: what a gateway interface's stack says
// must be keyed by the port's ifindex too. Here the quirk is an override
// of a macvlan (the host kernel has no driver with rows); the VM's
// TestGatewayQuirksBeneathVLAN reads it from the NIC model under a VLAN.
func TestDeviceQuirksReachThePort(t *testing.T) {
	ns, h := testutil.NewNetNS(t)
	testutil.IP(t, ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	testutil.IP(t, ns, "link", "add", "link", "v0", "name", "mv0", "type", "macvlan")
	var got map[int]fastpath.DeviceQuirks
	idx := map[string]int{}
	if err := kernel.InNetns(h, func() error {
		var err error
		got, err = deviceQuirks([]Iface{{Name: "mv0"}, {Name: "v1"}},
			map[string]fastpath.DeviceQuirks{"mv0": {ExactSelectors: true}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		for _, n := range []string{"v0", "v1", "mv0"} {
			li, lerr := kernel.Link(n)
			if lerr != nil {
				return lerr
			}
			idx[n] = li.Ifindex
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !got[idx["mv0"]].ExactSelectors || !got[idx["v0"]].ExactSelectors {
		t.Errorf("deviceQuirks = %v (mv0 %d, v0 %d): the macvlan's quirks must reach its port", got, idx["mv0"], idx["v0"])
	}
	if got[idx["v1"]].ExactSelectors {
		t.Errorf("deviceQuirks = %v: v1 (%d), v0's veth peer, is not beneath mv0", got, idx["v1"])
	}
}
