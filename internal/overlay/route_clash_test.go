// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/config"
	"sluice/internal/kernel"
)

// A remote VTEP whose address this host already routes some other way (a
// storage VIP, a DNS server, reached through another next hop) is never
// taken over: the plan is refused with a message naming the route, and
// the route is left as it was. A route sluice made (proto 115) is still
// moved when the remote's next hop changes.
func TestRemoteRouteNeverReplacesAForeignRoute(t *testing.T) {
	ns, h := liveNS(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "live.yaml")
	if err := os.WriteFile(file, []byte(liveHost), 0o644); err != nil {
		t.Fatal(err)
	}
	host, err := config.LoadHost(file)
	if err != nil {
		t.Fatal(err)
	}
	// The operator's route to 192.168.80.3 (here: through another next
	// hop on the uplink's subnet).
	ipNS(t, ns, "addr", "add", "192.168.70.1/24", "dev", "up0")
	ipNS(t, ns, "link", "set", "up0", "up")
	ipNS(t, ns, "route", "add", "192.168.80.3/32", "via", "192.168.70.53", "dev", "up0")
	before := ipNS(t, ns, "route", "show", "192.168.80.3/32")
	err = kernel.InNetns(h, func() error {
		live, err := ReadLive(host)
		if err != nil {
			return err
		}
		_, err = NewPlan(host, nil, live)
		return err
	})
	want := "this host already has the route 192.168.80.3/32 via 192.168.70.53 dev up0 (proto 3), which sluice did not create"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "ip route del 192.168.80.3/32") {
		t.Fatalf("apply over a foreign route: %v\nwant %q", err, want)
	}
	if after := ipNS(t, ns, "route", "show", "192.168.80.3/32"); after != before {
		t.Fatalf("the foreign route changed:\nbefore: %s\nafter:  %s", before, after)
	}
	// Without it, sluice adds its own; a changed next hop then replaces
	// sluice's route, which is sluice's to change.
	ipNS(t, ns, "route", "del", "192.168.80.3/32")
	if err := applyIn(t, h, host, dir); err != nil {
		t.Fatalf("apply: %v", err)
	}
	moved, err := config.ParseHost([]byte(strings.Replace(liveHost, "via: 192.168.70.3}", "via: 192.168.70.33}", 1)), file)
	if err != nil {
		t.Fatal(err)
	}
	if err := applyIn(t, h, moved, dir); err != nil {
		t.Fatalf("apply with a moved next hop: %v", err)
	}
	if r := ipNS(t, ns, "route", "show", "192.168.80.3/32"); !strings.Contains(r, "via 192.168.70.33 dev up0 proto 115 src 192.168.80.1") {
		t.Fatalf("sluice's route not moved: %s", r)
	}
}
