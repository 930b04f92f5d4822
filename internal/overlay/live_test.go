// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"sluice/internal/config"
	"sluice/internal/kernel"
	"sluice/internal/testutil"
)

// apply, plan and teardown against the host kernel in a throwaway
// namespace. The host kernel has VXLAN, veth and XFRM policies but no ESP
// and no bonding (those run in the VM tests): a single port and a VTEP.

// ipNS runs ip in namespace ns; a non-zero exit fails the test.
func ipNS(t *testing.T, ns string, args ...string) string {
	t.Helper()
	return testutil.Run(t, "ip", append([]string{"-n", ns}, args...)...)
}

// liveNS makes a named namespace with a veth "up0" (peer in a second
// namespace), and returns its name and handle.
func liveNS(t *testing.T) (string, netns.NsHandle) {
	t.Helper()
	testutil.RequireRoot(t, "creates network namespaces")
	name, h := testutil.NewNetNS(t)
	peer, _ := testutil.NewNetNS(t)
	// lo up, as on any host (bringing it up adds 127.0.0.1/8 for good).
	ipNS(t, name, "link", "set", "lo", "up")
	ipNS(t, name, "link", "add", "up0", "type", "veth", "peer", "name", "up0", "netns", peer)
	return name, h
}

// state is what apply may touch and teardown must restore.
func state(t *testing.T, ns string) string {
	t.Helper()
	return ipNS(t, ns, "-d", "-br", "link") + ipNS(t, ns, "-br", "addr") + ipNS(t, ns, "route") + ipNS(t, ns, "xfrm", "policy")
}

const liveHost = `name: live
uplinks:
  ports: [up0]
  mtu: 9000
  addresses: [192.168.70.1/24]
vteps:
  - name: vx0
    vni: 1024
    local: 192.168.80.1
    remotes:
      - {address: 192.168.80.2, via: 192.168.70.2}
      - {address: 192.168.80.3, via: 192.168.70.3}
    addresses: [192.168.90.1/24]
`

func TestApplyTeardownOnHostKernel(t *testing.T) {
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
	before := state(t, ns)
	inNS := func(f func() error) {
		t.Helper()
		if err := kernel.InNetns(h, f); err != nil {
			t.Fatal(err)
		}
	}
	var plan *Plan
	inNS(func() error {
		live, err := ReadLive(host)
		if err != nil {
			return err
		}
		plan, err = NewPlan(host, nil, live)
		return err
	})
	if plan.Empty() {
		t.Fatal("empty plan on a bare namespace")
	}
	inNS(func() error {
		_, err := Apply(plan, dir, nil)
		return err
	})
	link := ipNS(t, ns, "-d", "link", "show", "vx0")
	for _, w := range []string{"mtu 8950", "vxlan id 1024 local 192.168.80.1 ", "dstport 4789"} {
		if !strings.Contains(link, w) {
			t.Errorf("vx0 lacks %q:\n%s", w, link)
		}
	}
	// Two remotes: no default remote, one all-zeros FDB entry each.
	fdb := ipNS(t, ns, "link", "show") + ipNS(t, ns, "-d", "link", "show", "vx0")
	if strings.Contains(fdb, " remote ") {
		t.Errorf("vx0 has a default remote with two remotes:\n%s", fdb)
	}
	out, err := exec.Command("ip", "netns", "exec", ns, "bridge", "fdb", "show", "dev", "vx0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "00:00:00:00:00:00 dst 192.168.80.2") || !strings.Contains(string(out), "00:00:00:00:00:00 dst 192.168.80.3") {
		t.Errorf("fdb: %v\n%s", err, out)
	}
	if r := ipNS(t, ns, "route", "show", "192.168.80.3"); !strings.Contains(r, "via 192.168.70.3 dev up0 proto 115 src 192.168.80.1") {
		t.Errorf("route: %s", r)
	}
	// Idempotent: the host now matches.
	inNS(func() error {
		live, err := ReadLive(host)
		if err != nil {
			return err
		}
		if plan, err = NewPlan(host, nil, live); err != nil {
			return err
		}
		if !plan.Empty() {
			return fmt.Errorf("second plan has %d steps: %+v", len(plan.Steps), plan.Steps)
		}
		return nil
	})
	// A drifted FDB entry is put back, and only it.
	if out, err := exec.Command("ip", "netns", "exec", ns, "bridge", "fdb", "del", "00:00:00:00:00:00", "dev", "vx0", "dst", "192.168.80.3").CombinedOutput(); err != nil {
		t.Fatalf("bridge fdb del: %v\n%s", err, out)
	}
	inNS(func() error {
		live, err := ReadLive(host)
		if err != nil {
			return err
		}
		if plan, err = NewPlan(host, nil, live); err != nil {
			return err
		}
		if len(plan.Steps) != 1 || plan.Steps[0].Object != "fdb vx0 dst 192.168.80.3" {
			return fmt.Errorf("plan after the FDB entry went: %+v", plan.Steps)
		}
		_, err = Apply(plan, dir, nil)
		return err
	})
	// Teardown puts everything back, the port's MTU and state included.
	inNS(func() error {
		live, err := ReadLive(host)
		if err != nil {
			return err
		}
		j, has, err := LoadJournal(dir, host.Name, host.File)
		if err != nil {
			return err
		}
		if !has {
			return fmt.Errorf("no journal after apply")
		}
		td := NewTeardown(host, live, j, has)
		_, err = Teardown(td, j, nil)
		return err
	})
	if after := state(t, ns); after != before {
		t.Fatalf("teardown did not restore the namespace:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("journal left behind: %v", ents)
	}
}

// A step that fails stops apply; what was done is journaled and teardown
// undoes it.
func TestApplyStopsAtFirstFailure(t *testing.T) {
	ns, h := liveNS(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "live.yaml")
	// 192.168.80.2 is not reachable through any route: the route step's
	// gateway is unreachable, so the kernel refuses it.
	body := strings.Replace(liveHost, "      - {address: 192.168.80.3, via: 192.168.70.3}\n", "", 1)
	body = strings.Replace(body, "via: 192.168.70.2", "via: 10.99.0.1", 1)
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	host, err := config.LoadHost(file)
	if err != nil {
		t.Fatal(err)
	}
	before := state(t, ns)
	applyErr := applyIn(t, h, host, dir)
	var se *StepError
	if applyErr == nil || !strings.Contains(applyErr.Error(), "create route 192.168.80.2/32") || !strings.Contains(applyErr.Error(), "ip route add 192.168.80.2/32 via 10.99.0.1") {
		t.Fatalf("apply error: %v", applyErr)
	}
	if !asStepError(applyErr, &se) || se.Done == 0 {
		t.Fatalf("want a StepError after some steps, got %v", applyErr)
	}
	if strings.Contains(ipNS(t, ns, "link"), "vx0") {
		t.Fatal("apply went on after the failed step: vx0 exists")
	}
	teardownIn(t, h, host, dir)
	if after := state(t, ns); after != before {
		t.Fatalf("teardown after a failed apply:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// applyIn plans and applies host in the namespace; apply's own error is
// returned for the test to judge, a failure to plan fails the test.
func applyIn(t *testing.T, h netns.NsHandle, host *config.Host, dir string) error {
	t.Helper()
	var applyErr error
	if err := kernel.InNetns(h, func() error {
		live, err := ReadLive(host)
		if err != nil {
			return err
		}
		plan, err := NewPlan(host, nil, live)
		if err != nil {
			return err
		}
		_, applyErr = Apply(plan, dir, nil)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return applyErr
}

// teardownIn tears host down in the namespace from its journal in dir.
func teardownIn(t *testing.T, h netns.NsHandle, host *config.Host, dir string) {
	t.Helper()
	if err := kernel.InNetns(h, func() error {
		live, err := ReadLive(host)
		if err != nil {
			return err
		}
		j, has, err := LoadJournal(dir, host.Name, host.File)
		if err != nil || !has {
			return fmt.Errorf("journal: %v %v", has, err)
		}
		_, err = Teardown(NewTeardown(host, live, j, has), j, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func asStepError(err error, se **StepError) bool {
	e, ok := err.(*StepError)
	if ok {
		*se = e
	}
	return ok
}
