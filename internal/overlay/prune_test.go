// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/config"
	"sluice/internal/kernel"
)

// A remote leaves (sluice agent: a host left the overlay): the prune
// removes its FDB entry and route and nothing the remaining remote needs;
// applying the new state then matches, and a teardown of the new state
// leaves the namespace exactly as before the first apply (nothing of the
// removed remote is left behind, the journal stays consistent).
// Without the prune, route 192.168.80.3/32 stays after the new apply.
func TestPruneRemovedRemote(t *testing.T) {
	ns, h := liveNS(t)
	dir := t.TempDir()
	load := func(name, body string) *config.Host {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		host, err := config.LoadHost(p)
		if err != nil {
			t.Fatal(err)
		}
		host.File, host.Name = "live.yaml", "live"
		return host
	}
	prev := load("prev.yaml", liveHost)
	next := load("next.yaml", strings.Replace(liveHost, "      - {address: 192.168.80.3, via: 192.168.70.3}\n", "", 1))
	before := state(t, ns)
	apply := func(host *config.Host) {
		t.Helper()
		if err := applyIn(t, h, host, dir); err != nil {
			t.Fatal(err)
		}
	}
	apply(prev)
	var pruned *Plan
	if err := kernel.InNetns(h, func() error {
		live, err := ReadLive(next)
		if err != nil {
			return err
		}
		j, _, err := LoadJournal(dir, next.Name, next.File)
		if err != nil {
			return err
		}
		pruned = NewPrune(prev, next, live, j)
		_, err = Prune(pruned, j)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var objs []string
	for _, s := range pruned.Steps {
		objs = append(objs, s.Action+" "+s.Object)
	}
	if got := strings.Join(objs, ", "); got != "delete fdb vx0 dst 192.168.80.3, delete route 192.168.80.3/32" {
		t.Fatalf("prune steps: %s", got)
	}
	if r := ipNS(t, ns, "route", "show", "192.168.80.2"); !strings.Contains(r, "via 192.168.70.2") {
		t.Fatalf("the remaining remote's route went: %q", r)
	}
	apply(next)
	out, _ := exec.Command("ip", "netns", "exec", ns, "bridge", "fdb", "show", "dev", "vx0").CombinedOutput()
	if strings.Contains(string(out), "192.168.80.3") {
		t.Errorf("fdb still has the removed remote:\n%s", out)
	}
	if r := ipNS(t, ns, "route", "show", "192.168.80.3"); r != "" {
		t.Errorf("the removed remote's route is left: %q", r)
	}
	teardownIn(t, h, next, dir)
	if after := state(t, ns); after != before {
		t.Fatalf("after prune, apply and teardown:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
