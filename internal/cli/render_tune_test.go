// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"sluice/internal/diag"
	"sluice/internal/testutil"
	"sluice/internal/tune"
)

// The text of sluice tune: these tests moved here from internal/tune with
// the renderers, their assertions unchanged.

// A veth has no rings, coalescing, pause, combined channels or private
// flags, and its lro/ntuple are [fixed] off: plan goes through the whole
// profile, reports each of those as not applicable with the reason,
// proposes only what the device can change, and apply changes only that.
func TestTuneNotApplicableOnVeth(t *testing.T) {
	testutil.RequireRoot(t, "a network namespace")
	name, _ := testutil.NewNetNS(t)
	if out, err := exec.Command("ip", "-n", name, "link", "add", "v0", "type", "veth", "peer", "name", "v1").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	p, err := tune.Parse("veth.yaml", []byte(`
interfaces:
  v0:
    rx-queues: 2
    rings: {rx: 4096, tx: 4096}
    coalesce: {adaptive-rx: false}
    flow-control: {rx: false, tx: false}
    private-flags: {rx_striding_rq: true}
    features: {gro: true, lro: true, ntuple: true, no-such-thing: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, _ := netns.Get()
	defer orig.Close()
	ns, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if err := netns.Set(ns); err != nil {
		t.Fatal(err)
	}
	defer netns.Set(orig)

	h := &tune.Host{FS: diag.Host}
	items, err := h.Collect(p)
	if err != nil {
		t.Fatalf("plan aborted on an unsupported setting: %v", err)
	}
	var plan bytes.Buffer
	renderTunePlan(&plan, items)
	t.Logf("plan:\n%s", plan.String())
	if got, want := driftKeys(items), "v0 feature rx-gro: off -> on"; got != want {
		t.Errorf("drift:\n%s\nwant only what veth can change:\n%s", got, want)
	}
	for _, want := range []string{
		"# [N/A] v0 channels combined (want 2): the device has no combined channels",
		"# [N/A] v0 rings (want rx 4096 tx 4096): the driver does not implement ethtool -g (EOPNOTSUPP)",
		"# [N/A] v0 flow-control (want rx off tx off): the driver does not implement ethtool -a (EOPNOTSUPP)",
		"# [N/A] v0 coalesce (want (profile)): the driver does not implement ethtool -c (EOPNOTSUPP)",
		"# [N/A] v0 private flag rx_striding_rq (want on): the driver has no private flag rx_striding_rq",
		"# [N/A] v0 feature rx-lro (want on): rx-lro is [fixed] off: the driver cannot change it",
		"# [N/A] v0 feature rx-ntuple-filter (want on): rx-ntuple-filter is [fixed] off",
		"# [N/A] v0 feature no-such-thing (want on): the device has no feature no-such-thing",
	} {
		if !strings.Contains(plan.String(), want) {
			t.Errorf("plan lacks %q", want)
		}
	}
	if strings.Contains(plan.String(), "ethtool -K v0 rx-lro") || strings.Contains(plan.String(), "ethtool -G") {
		t.Errorf("plan proposes a change the device cannot make:\n%s", plan.String())
	}
	changed, remaining, err := h.Apply(p)
	if err != nil || len(changed) != 1 || len(remaining) != 0 {
		t.Fatalf("apply: changed %d (want 1: rx-gro), remaining %d, err %v", len(changed), len(remaining), err)
	}
}

// Under --sysroot nothing is skipped silently: setpci and ethtool items
// say why they were not checked.
func TestTuneSysrootSaysWhatItSkips(t *testing.T) {
	f := diag.FS{Root: cx7Root}
	p, err := tune.Parse("s.yaml", []byte("interfaces:\n  p0:\n    cpus: 4-13\n    pcie-max-read-req: 2048\n    flow-control: {rx: false, tx: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	items, err := (&tune.Host{FS: f, NoEthtool: true}).Collect(p)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	renderNotApplicable(&b, items, "")
	for _, want := range []string{
		"[N/A] p0 pcie max-read-req (want 2048): skipped under --sysroot: setpci reads the live PCI config space",
		"[N/A] p0 ethtool settings (want (profile)): skipped under --sysroot",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
}

// plan prints the layout as the ConnectX-7 benchmark's comment does.
func TestTuneDaemonLayoutText(t *testing.T) {
	base := "cmdline:\n  isolcpus: managed_irq,domain,4-23\n  irqaffinity: 0-3\ninterfaces:\n  p0:\n    rx-queues: 10\n    cpus: 4-13\n  p1:\n    rx-queues: 10\n    cpus: 14-23\n"
	p, err := tune.Parse("t.yaml", []byte("daemon-cpus: 2-3\n"+base))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	renderLayout(&b, p)
	want := `# CPU layout:
#   0-1     housekeeping (kernel, generic IRQs, services: irqaffinity minus the above)
#   2-3     sluice gateway daemon (gateway.yaml: daemon-cpu: 2-3)
#   4-13    p0 rx queues 0..9
#   14-23   p1 rx queues 0..9
`
	if b.String() != want {
		t.Errorf("layout:\n%s\nwant:\n%s", b.String(), want)
	}
}

func driftKeys(items []tune.Item) string {
	var ks []string
	for _, it := range tune.Drift(items) {
		ks = append(ks, it.Key+": "+it.Live+" -> "+it.Want)
	}
	return strings.Join(ks, "\n")
}
