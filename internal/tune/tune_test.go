// SPDX-License-Identifier: Apache-2.0

package tune

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"sluice/internal/config"
	"sluice/internal/diag"
	"sluice/internal/testutil"
)

// copyTree copies the ConnectX-7 benchmark fixture host (internal/diag/testdata/cx7)
// into a temporary directory, symbolic links kept.
func copyTree(t *testing.T) diag.FS {
	t.Helper()
	return diag.FS{Root: testutil.CopyTree(t, "../diag/testdata/cx7")}
}

func write(t *testing.T, f diag.FS, p, v string) {
	t.Helper()
	testutil.WriteFiles(t, f.Root, map[string]string{p: v})
}

func driftKeys(items []Item) string {
	var ks []string
	for _, it := range Drift(items) {
		ks = append(ks, it.Key+": "+it.Live+" -> "+it.Want)
	}
	return strings.Join(ks, "\n")
}

// IRQ pinning and THP on the seed host's fixture tree: drift by hand is
// reported with live and wanted values; apply fixes exactly that; a second
// apply changes nothing; the command line is reported, never edited.
func TestTuneFixtureIRQAndTHP(t *testing.T) {
	f := copyTree(t)
	write(t, f, "/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never")
	write(t, f, "/sys/kernel/mm/transparent_hugepage/defrag", "always defer defer+madvise [madvise] never")
	p, err := Load("testdata/seed004.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h := &Host{FS: f, NoEthtool: true}

	items, err := h.Collect(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := driftKeys(items), "thp enabled: madvise -> never\nthp defrag: madvise -> never"; got != want {
		t.Fatalf("drift on the seed host:\n%s\nwant only THP:\n%s", got, want)
	}

	// Drift by hand: p0 rx-3 on CPU 17, p1 rx-9 on CPUs 0-47.
	write(t, f, "/proc/irq/178/smp_affinity_list", "17")
	write(t, f, "/proc/irq/231/smp_affinity_list", "0-47")
	items, _ = h.Collect(p)
	want := []string{"p0 rx-3 irq 178 affinity: 17 -> 7", "p1 rx-9 irq 231 affinity: 0-47 -> 23"}
	for _, w := range want {
		if !strings.Contains(driftKeys(items), w) {
			t.Errorf("drift lacks %q:\n%s", w, driftKeys(items))
		}
	}

	changed, remaining, err := h.Apply(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 4 || len(remaining) != 0 {
		t.Fatalf("apply changed %d (want 4: two IRQs, two THP files), left:\n%s", len(changed), driftKeys(remaining))
	}
	if s, _ := f.ReadString("/proc/irq/178/smp_affinity_list"); s != "7" {
		t.Errorf("irq 178 affinity %q after apply, want 7", s)
	}
	changed, remaining, err = h.Apply(p)
	if err != nil || len(changed) != 0 || len(remaining) != 0 {
		t.Fatalf("second apply: changed %d, remaining %d, err %v: not idempotent", len(changed), len(remaining), err)
	}

	// The command line is checked only.
	p.Cmdline["nohz_full"] = "2-23"
	items, _ = h.Collect(p)
	d := Drift(items)
	if len(d) != 1 || !d[0].ReportOnly || d[0].Live != "4-23" {
		t.Fatalf("drift %+v, want one report-only cmdline item", d)
	}
	changed, remaining, _ = h.Apply(p)
	if len(changed) != 0 || len(remaining) != 1 {
		t.Fatalf("apply touched the command line: changed %v", changed)
	}
}

func TestTuneProfileErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"thp: sometimes\n", "t.yaml:1: thp: \"sometimes\": want always, madvise or never"},
		{"interfaces:\n  p0:\n    rx-queues: 10\n    cpus: 4-12\n", "t.yaml:4: interfaces.p0.cpus: 4-12 has 9 CPUs for 10 rx-queues"},
		{"interfaces:\n  p0:\n    pcie-max-read-req: 3000\n", "t.yaml:3: interfaces.p0.pcie-max-read-req: 3000: want 128"},
		{"interfaces:\n  p0:\n    ringz: {rx: 1}\n", "t.yaml:3: interfaces.p0.ringz: unknown key; the keys here are rx-queues, cpus, rss-equal, rings"},
		{"sysctls:\n  net/core/busy_poll: 50\n", "t.yaml:2: sysctls.net/core/busy_poll: not a sysctl name"},
		// A typo must not build a set of 400 million CPUs (it ran for minutes).
		{"interfaces:\n  p0:\n    cpus: 0-400000000\n", "t.yaml:3: interfaces.p0.cpus: cpu list \"0-400000000\": CPU 400000000 is past the largest CPU number Linux supports (8191)"},
	} {
		_, err := Parse("t.yaml", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// tune.yaml reads as gateway.yaml and host.yaml do (yamldoc): every
// problem at once, each as file:line: field: what is wrong; the fix, with
// the same words config uses for the same mistake.
func TestTuneProfileErrorsReadLikeConfig(t *testing.T) {
	_, err := Parse("t.yaml", []byte(`interfaces:
  p0:
    rx-queues: -1
    features: {gro: on}
    rings: {rx: 1, rx: 2}
    rx_queues: 4
  p1:
cmdline: [isolcpus]
`))
	want := []string{
		`t.yaml:3: interfaces.p0.rx-queues: -1 is negative; use a number from 0 to 4294967295`,
		`t.yaml:4: interfaces.p0.features.gro: want true or false, got the string "on"`,
		`t.yaml:5: interfaces.p0.rings.rx: set twice (first on line 5); keep one`,
		`t.yaml:6: interfaces.p0.rx_queues: unknown key; did you mean rx-queues?`,
		`t.yaml:7: interfaces.p1: has no value; give it one (such as p0: {rx-queues: 8, cpus: 4-11}), or remove the key`,
		`t.yaml:8: cmdline: want keys under cmdline (such as isolcpus: 4-23), got a list`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Fatalf("errors:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	// The same mistake in gateway.yaml: the same words after the field.
	_, gerr := config.ParseGateway([]byte("lock-memory: on\ninterfaces: [{name: p0}]\n"), "g.yaml")
	if gerr == nil || !strings.Contains(gerr.Error(), `g.yaml:1: lock-memory: want true or false, got the string "on"`) {
		t.Fatalf("gateway.yaml's wording changed (%v): keep this test's in step", gerr)
	}
}

// Sysctls and ethtool features in a real network namespace: apply, then
// check shows no drift; a change by hand shows up as drift.
func TestTuneNetns(t *testing.T) {
	testutil.RequireRoot(t, "a network namespace")
	name, _ := testutil.NewNetNS(t)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	ip("-n", name, "link", "add", "v0", "type", "veth", "peer", "name", "v1")

	p, err := Parse("netns.yaml", []byte(`
sysctls:
  net.ipv4.ip_forward: 1
  net.ipv4.conf.all.rp_filter: 0
  net.core.somaxconn: 1024
interfaces:
  v0:
    features: {gro: true, tso: false}
`))
	if err != nil {
		t.Fatal(err)
	}
	in := func(fn func()) {
		t.Helper()
		ns, err := netns.GetFromName(name)
		if err != nil {
			t.Fatal(err)
		}
		defer ns.Close()
		testutil.InNetnsHandle(t, ns, fn)
	}
	h := &Host{FS: diag.Host}
	in(func() {
		items, err := h.Collect(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(Drift(items)) == 0 {
			t.Fatalf("a fresh namespace already matches the profile: the test cannot tell apply from no-op\n%+v", items)
		}
		if _, remaining, err := h.Apply(p); err != nil || len(remaining) != 0 {
			t.Fatalf("apply: err %v, still differing:\n%s", err, driftKeys(remaining))
		}
	})
	// By hand, as an operator would.
	for _, c := range [][]string{{"sysctl", "-qw", "net.core.somaxconn=4096"}, {"ethtool", "-K", "v0", "gro", "off"}} {
		if out, err := exec.Command("ip", append([]string{"netns", "exec", name}, c...)...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	in(func() {
		items, err := h.Collect(p)
		if err != nil {
			t.Fatal(err)
		}
		got := driftKeys(items)
		if got != "sysctl net.core.somaxconn: 4096 -> 1024\nv0 feature rx-gro: off -> on" {
			t.Fatalf("drift after changes by hand:\n%s", got)
		}
	})
}

// A guest whose vCPU runs on a CPU the profile gives a queue IRQ: tune
// refuses and names the guest, the thread and the CPUs to avoid; with the
// vCPU elsewhere the profile applies.
func TestTuneKeepsIRQsOffGuests(t *testing.T) {
	f := copyTree(t)
	write(t, f, "/proc/4242/comm", "qemu-system-x86")
	write(t, f, "/proc/4242/cmdline", "qemu-system-x86_64\x00-name\x00guest=vm1")
	write(t, f, "/proc/4242/task/4243/comm", "CPU 0/KVM")
	write(t, f, "/proc/4242/task/4243/status", "Cpus_allowed_list:\t7")
	write(t, f, "/proc/4242/task/4244/comm", "vhost-4242")
	write(t, f, "/proc/4242/task/4244/status", "Cpus_allowed_list:\t30")
	p, err := Load("testdata/seed004.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h := &Host{FS: f, NoEthtool: true}
	_, err = h.Collect(p)
	if err == nil || !strings.Contains(err.Error(), "interfaces.p0.cpus: CPU 7 runs vm1 CPU 0/KVM; keep the NIC's queue IRQs off the guests' vCPUs and vhost threads") ||
		!strings.Contains(err.Error(), "choose CPUs other than 7,30") {
		t.Fatalf("profile pinning an IRQ on a vCPU: %v", err)
	}
	write(t, f, "/proc/4242/task/4243/status", "Cpus_allowed_list:\t31")
	if _, err := h.Collect(p); err != nil {
		t.Fatalf("vCPU moved off the profile's CPUs: %v", err)
	}
}
