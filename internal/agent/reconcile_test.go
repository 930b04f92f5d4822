// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"sluice/internal/fleet"
	"sluice/internal/kernel"
	"sluice/internal/testutil"
)

// The reconciler on the host kernel, in a throwaway namespace: a port and
// a VXLAN VTEP with two remotes (the host kernel has no ESP: the IPsec
// side runs in the fleet test with charon and in the VM tests).

// ipn runs ip in namespace ns; a non-zero exit fails the test.
func ipn(t *testing.T, ns string, args ...string) string {
	t.Helper()
	return testutil.Run(t, "ip", append([]string{"-n", ns}, args...)...)
}

func snapshot(t *testing.T, ns string) string {
	t.Helper()
	fdb, _ := exec.Command("ip", "netns", "exec", ns, "bridge", "fdb", "show").CombinedOutput()
	return ipn(t, ns, "-d", "link") + ipn(t, ns, "-br", "addr") + ipn(t, ns, "route") + string(fdb)
}

const goodDoc = `name: agent-test
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
`

func hostNS(t *testing.T) (string, netns.NsHandle) {
	ns, h := testutil.NewNetNS(t)
	ipn(t, ns, "link", "set", "lo", "up")
	ipn(t, ns, "link", "add", "up0", "type", "veth", "peer", "name", "up0p")
	return ns, h
}

func newRec(t *testing.T, h netns.NsHandle, dir string) *Reconciler {
	t.Helper()
	r, err := NewReconciler(dir, dir, "t", t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	r.InNS = func(f func() error) error { return kernel.InNetns(h, f) }
	return r
}

// Apply, then nothing to do; drift (an FDB entry deleted by hand) is
// repaired and flagged as drift; a restarted reconciler (same state dir)
// finds nothing to do.
func TestReconcileDriftAndRestart(t *testing.T) {
	ns, h := hostNS(t)
	dir := t.TempDir()
	r := newRec(t, h, dir)
	d := Desired{Doc: []byte(goodDoc), File: dir + "/agent-test.yaml"}
	if o := r.Reconcile(d); o.Result != ResultApplied || o.Steps == 0 {
		t.Fatalf("first: %+v", o)
	}
	if o := r.Reconcile(d); o.Result != ResultNothingToDo {
		t.Fatalf("second: %+v", o)
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, "bridge", "fdb", "del", "00:00:00:00:00:00", "dev", "vx0", "dst", "192.168.80.3").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	o := r.Reconcile(d)
	if o.Result != ResultApplied || !o.Drift || o.Steps != 1 {
		t.Fatalf("drift: %+v", o)
	}
	r2 := newRec(t, h, dir)
	if dg, _ := r2.LastGood(); dg != fleet.Digest(d.Doc) {
		t.Fatalf("restart: last good %q", dg)
	}
	if o := r2.Reconcile(d); o.Result != ResultNothingToDo {
		t.Fatalf("after restart: %+v", o)
	}
}

// A desired state whose apply fails part-way (the port's MTU is changed,
// then a route's gateway is unreachable) is rolled back: the host is
// exactly as the last good state left it, and the last good state is
// still the old one. Without the rollback up0 keeps MTU 8000.
func TestReconcileFailedApplyRollsBack(t *testing.T) {
	ns, h := hostNS(t)
	dir := t.TempDir()
	r := newRec(t, h, dir)
	good := Desired{Doc: []byte(goodDoc), File: dir + "/agent-test.yaml"}
	if o := r.Reconcile(good); o.Result != ResultApplied {
		t.Fatalf("good: %+v", o)
	}
	before := snapshot(t, ns)
	bad := strings.Replace(goodDoc, "mtu: 9000", "mtu: 8000", 1)
	bad = strings.Replace(bad, "      - {address: 192.168.80.3, via: 192.168.70.3}\n",
		"      - {address: 192.168.80.3, via: 192.168.70.3}\n      - {address: 192.168.80.4, via: 10.99.0.1}\n", 1)
	o := r.Reconcile(Desired{Doc: []byte(bad), File: good.File})
	if o.Result != ResultFailed || !strings.Contains(o.Message, "rolled back to the last good state") {
		t.Fatalf("bad: %+v", o)
	}
	if after := snapshot(t, ns); after != before {
		t.Fatalf("not rolled back:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if dg, _ := r.LastGood(); dg != fleet.Digest(good.Doc) {
		t.Fatalf("last good moved to the failed state")
	}
	// A refused state (the plan cannot be made) changes nothing either.
	o = r.Reconcile(Desired{Doc: []byte(strings.Replace(goodDoc, "[up0]", "[nosuch0]", 1)), File: good.File})
	if o.Result != ResultRefused {
		t.Fatalf("refused: %+v", o)
	}
	if after := snapshot(t, ns); after != before {
		t.Fatalf("a refused state changed the host:\n%s", after)
	}
}
