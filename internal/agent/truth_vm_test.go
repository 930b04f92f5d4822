// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"sluice/internal/config"
	"sluice/internal/kernel"
	"sluice/internal/testutil"
)

// truthHost is one host's file on a NIC model port: one manual peer per
// entry of peers ("name offload spi-out spi-in remote"), each behind a
// VTEP of its own (vx0, vx1, ...: a VTEP floods to all its remotes, so a
// shared one would send the first peer's ARP to every peer); only vx0 has
// an address, so only the first peer ever carries traffic.
func truthHost(name string, me int, port string, peers ...[5]string) string {
	s := fmt.Sprintf("name: %s\nuplinks:\n  ports: [%s]\n  addresses: [192.168.71.%d/24]\nvteps:\n", name, port, me)
	for i, p := range peers {
		s += fmt.Sprintf("  - name: vx%d\n    vni: %d\n    local: 192.168.81.%d\n    remotes: [{address: 192.168.81.%s, via: 192.168.71.%s}]\n",
			i, 1024+i, me, p[4], p[4])
		if i == 0 {
			s += fmt.Sprintf("    addresses: [192.168.91.%d/24]\n", me)
		}
	}
	s += fmt.Sprintf("ipsec:\n  keys: %s.keys\n  peers:\n", name)
	for _, p := range peers {
		s += fmt.Sprintf("    - name: %s\n      local: 192.168.81.%d\n      remote: 192.168.81.%s\n      spi-out: %s\n      spi-in: %s\n      esn: true\n",
			p[0], me, p[4], p[2], p[3])
		if p[1] != "" {
			s += "      offload: " + p[1] + "\n      offload-dev: " + port + "\n"
		}
	}
	return s
}

// Per-SA offload truth from the kernel's own SA state, on the NIC model:
// host a holds a packet-offloaded SA pair with b (which answers) and a
// crypto-offloaded pair with c (no such host: its SAs carry nothing), on
// the same port, whose SA table then is full (sa_budget 4): d's pair,
// asked prefer-packet (auto), falls back to software, and says why. After traffic to b, each SA says what the kernel holds
// for it (mode, device), who counts it, and whether its own counters
// moved: b's count on the device, c's stay idle although the port's
// IPsec counters moved (judged per device, as before, c's would have
// looked as busy as b's).
func TestOffloadTruthPerSA(t *testing.T) {
	testutil.RequireVM(t)
	testutil.LoadNicmodel(t)
	testutil.UseNicmodelProfile(t, testutil.ProfileMlx5_612)
	nsA, hA := testutil.NewNetNS(t)
	nsB, hB := testutil.NewNetNS(t)
	for _, ns := range []string{nsA, nsB} {
		// No IPv6 control traffic: only the pings use an SA.
		testutil.NSRun(t, ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
	testutil.NicPair(t, nsA, "ta0", nsB, "tb0")
	budget := "/sys/module/nicmodel/parameters/sa_budget"
	old, err := os.ReadFile(budget)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(budget, old, 0o644) })
	if err := os.WriteFile(budget, []byte("4"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, s string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const kab, kba, kac, kca = "00112233445566778899aabbccddeeff01020304", "ffeeddccbbaa99887766554433221100a0b0c0d0",
		"0102030405060708090a0b0c0d0e0f1011121314", "1112131415161718191a1b1c1d1e1f2021222324"
	write("a.keys", "b out "+kab+"\nb in "+kba+"\nc out "+kac+"\nc in "+kca+"\nd out "+kac+"\nd in "+kca+"\n", 0o600)
	write("b.keys", "a out "+kba+"\na in "+kab+"\n", 0o600)
	fa := write("a.yaml", truthHost("a", 1, "ta0", [5]string{"b", config.OffloadModePacket, "0x1001", "0x2001", "2"},
		[5]string{"c", config.OffloadModeCrypto, "0x1003", "0x3001", "3"}, [5]string{"d", config.OffloadModeAuto, "0x1004", "0x4001", "4"}), 0o644)
	fb := write("b.yaml", truthHost("b", 2, "tb0", [5]string{"a", "", "0x2001", "0x1001", "1"}), 0o644)
	reconciler := func(h netns.NsHandle, name string) *Reconciler {
		r, err := NewReconciler(t.TempDir(), t.TempDir(), name, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		r.InNS = func(f func() error) error { return kernel.InNetns(h, f) }
		return r
	}
	reconcile := func(r *Reconciler, file, want string) Outcome {
		t.Helper()
		doc, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		out := r.Reconcile(Desired{Doc: doc, File: file})
		if out.Result != want {
			t.Fatalf("%s: %+v, want %s", file, out, want)
		}
		return out
	}
	ra := reconciler(hA, "a")
	reconcile(reconciler(hB, "b"), fb, ResultApplied)
	outA := reconcile(ra, fa, ResultApplied)
	tr := newTruthTracker()
	var first []SATruth
	_ = kernel.InNetns(hA, func() error { first = tr.look(outA.Report, outA.OffloadNotes); return nil })
	portBefore := testutil.EthStats(t, nsA, "ta0")["tx_ipsec_packets"]
	testutil.NSRun(t, nsA, "ping", "-c", "5", "-i", "0.2", "-W", "2", "192.168.91.2")
	// c's SAs carry nothing: its VTEP vx1 has no address to send from.
	if testutil.EthStats(t, nsA, "ta0")["tx_ipsec_packets"] == portBefore {
		t.Fatal("the port's IPsec counters did not move with the pings")
	}
	// The next reconcile's verification (the agent's next look).
	again := reconcile(ra, fa, ResultNothingToDo)
	var ts []SATruth
	_ = kernel.InNetns(hA, func() error { ts = tr.look(again.Report, again.OffloadNotes); return nil })
	if len(first) != 6 || len(ts) != 6 {
		t.Fatalf("SAs: first look %+v, second %+v", first, ts)
	}
	for _, s := range first {
		if s.Counting != nil {
			t.Errorf("first look at %s/%s: counting %v, want not known", s.Peer, s.Dir, *s.Counting)
		}
	}
	for _, s := range ts {
		if s.Peer == "d" {
			if s.Got != config.OffloadModeNone || s.Dev != "" || s.Evidence != EvidenceSoftware || !s.Fallback || !strings.Contains(strings.Join(s.WhyNot, "; "), "SA table is full") {
				t.Errorf("d/%s (the port's SA table full): %+v", s.Dir, s)
			}
			continue
		}
		want := map[string]struct{ got, evidence string }{"b": {config.OffloadModePacket, EvidenceDevice}, "c": {config.OffloadModeCrypto, EvidenceKernel}}[s.Peer]
		if s.Got != want.got || s.Dev != "ta0" || s.Evidence != want.evidence || s.Fallback {
			t.Errorf("%s/%s spi 0x%x: %+v, want %s on ta0, evidence %s", s.Peer, s.Dir, s.SPI, s, want.got, want.evidence)
		}
		moving := s.Peer == "b"
		if s.Counting == nil || *s.Counting != moving {
			t.Errorf("%s/%s: counting %v, want %v (packets %d)", s.Peer, s.Dir, s.Counting, moving, s.Packets)
		}
	}
	sum := summary(ts)
	if sum.Packet != 2 || sum.Crypto != 2 || sum.None != 2 || sum.Counting != 2 || sum.Idle != 4 || len(sum.NotAsAsked) != 2 ||
		sum.NotAsAsked[0].Peer != "d" || !strings.Contains(sum.NotAsAsked[0].Reason, "SA table is full") {
		t.Errorf("summary %+v", sum)
	}
	m := NewMetrics()
	m.truth(ts, []string{"b", "c", "d"})
	for _, c := range []struct {
		peer string
		want float64
	}{{"b", 1}, {"c", 0}, {"d", 0}} {
		if got := value(t, m.saCounting.WithLabelValues(c.peer, "out")); got != c.want {
			t.Errorf("sluice_sa_counting{peer=%s,dir=out} = %v, want %v", c.peer, got, c.want)
		}
	}
	if got := value(t, m.saFallback.WithLabelValues("d", "out")); got != 1 {
		t.Errorf("sluice_sa_offload_fallback{peer=d,dir=out} = %v, want 1", got)
	}
}
