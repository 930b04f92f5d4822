// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

// Seed 000's layout with packet offload, applied by sluice for real on the
// NIC model (kmod/nicmodel): host A has an active-backup bond over two
// model ports (a0, a1) whose SAs and policies are packet-offloaded to a0
// (the seed's "offload packet dev ${PF0}"), VXLAN over ESP transport
// between VTEP addresses on lo. Host B is the same over b0, b1 with
// software ESP, so its model ports hold no SA and decrypt nothing: a
// capture on each port's tap (testutil's wire oracle) sees the wire as it
// was, and their rx_cleartext_packets must agree with it.

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sluice/internal/diag"
	"sluice/internal/testutil"
)

// ovPacketHost is one host's file: ports p0, p1 in a bond, a VXLAN VTEP,
// one manual peer whose SAs are offloaded as offload/offload-dev say.
func ovPacketHost(name string, ports [2]string, me, other int, spiOut, spiIn, offload string) string {
	s := fmt.Sprintf(`name: %s
uplinks:
  ports: [%s, %s]
  bond: {name: bond0, miimon: 100, primary: %s}
  addresses: [192.168.70.%d/24]
vteps:
  - name: vx0
    vni: 1024
    local: 192.168.80.%d
    remotes: [{address: 192.168.80.%d, via: 192.168.70.%d}]
    addresses: [192.168.90.%d/24]
ipsec:
  keys: %s.keys
  peers:
    - name: peer
      local: 192.168.80.%d
      remote: 192.168.80.%d
      spi-out: %s
      spi-in: %s
`, name, ports[0], ports[1], ports[0], me, me, other, other, me, name, me, other, spiOut, spiIn)
	if offload == "" {
		// The far end of a packet-offloaded peer: offload packet turns
		// ESN on at the other end (sluice's default, which mlx5 needs to
		// carry a moved SA's sequence number), so this end says it.
		return s + "      esn: true\n"
	}
	// Seed 000's layout leaks at a failover on 6.12 (plan refuses it,
	// plan_driverquirk.go): these tests show that leak, so they accept it.
	// No esn: offload packet turns it on.
	return s + "      offload: packet\n      offload-dev: " + offload + "\n" +
		"      accept-leaks: [cleartext-accepted-on-offloaded-in]\n"
}

// packetProfiles are the NIC model's driver profiles the packet-offload
// overlay tests run under, whatever $SLUICE_NICMODEL_PROFILE says: both
// mlx5 ones, and the run's own profile when it is another (kernel-xfrm,
// scripts/vmtest.sh's default).
func packetProfiles() []string {
	ps := []string{testutil.ProfileMlx5_612, testutil.ProfileMlx5Upstream}
	if p := testutil.NicmodelProfile(); !slices.Contains(ps, p) {
		ps = append(ps, p)
	}
	return ps
}

// ovPacketLab is the two hosts of the packet-offload overlay tests.
type ovPacketLab struct {
	a, b   string // namespaces
	af, bf string // host files
	// The wire oracles: captures on b0 and b1.
	ob0, ob1 *testutil.WireOracle
	// wireChecked: checkWire ran (a test that deletes B's namespace
	// checks the oracles first; the cleanup then has nothing to do).
	wireChecked *bool
	// B's ports' counters when the captures began.
	b0Stats, b1Stats map[string]uint64
}

// checkWire checks B's ports' cleartext counters against the captures
// (testutil.WireAgrees) and ends the captures, once: the lab's cleanup
// does it otherwise. A capture's socket holds B's namespace alive.
func (o ovPacketLab) checkWire(t *testing.T) {
	t.Helper()
	if *o.wireChecked {
		return
	}
	*o.wireChecked = true
	testutil.WireAgrees(t, o.ob0, 0, o.b, "b0", o.b0Stats)
	testutil.WireAgrees(t, o.ob1, 0, o.b, "b1", o.b1Stats)
	o.ob0.Stop()
	o.ob1.Stop()
}

// useOffloadDev rewrites A's file with another offload-dev.
func (o ovPacketLab) useOffloadDev(t *testing.T, dev string) {
	t.Helper()
	ovWrite(t, o.af, ovPacketHost("a", [2]string{"a0", "a1"}, 1, 2, "0x1001", "0x2001", dev), 0o644)
}

// encrypts pings across and checks that port encrypted them and that no
// cleartext crossed the wire.
func (o ovPacketLab) encrypts(t *testing.T, port string) {
	t.Helper()
	before, w := ethStats(t, o.a, port), o.wire(t)
	if out, ok := o.ping(t, 3); !ok {
		t.Fatalf("ping across the overlay:\n%s", out)
	}
	d := statDelta(before, ethStats(t, o.a, port), "tx_ipsec_packets", "rx_ipsec_packets")
	if d["tx_ipsec_packets"] < 3 || d["rx_ipsec_packets"] < 3 {
		t.Fatalf("%s: %v for 3 pings, want >= 3 encrypted and decrypted", port, d)
	}
	if leak := o.wire(t) - w; leak != 0 {
		t.Fatalf("%d cleartext IP packets crossed the wire", leak)
	}
}

// leaks pings across (which B's IN policy drops) and returns how many
// cleartext IP packets crossed the wire.
func (o ovPacketLab) leaks(t *testing.T) uint64 {
	t.Helper()
	w := o.wire(t)
	if out, ok := o.ping(t, 3); ok {
		t.Fatalf("ping passed, but B's IN policy should drop cleartext:\n%s", out)
	}
	return o.wire(t) - w
}

// verifyFails runs verify on A and wants exit code 3 and each of want.
func (o ovPacketLab) verifyFails(t *testing.T, want ...string) {
	t.Helper()
	out, err := ovSluice(t, o.a, "verify", "-f", o.af)
	t.Logf("%s", out)
	var ee *exec.ExitError
	if !errorsAs(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("verify: %v, want exit code 3 (failed)", err)
	}
	mustContain(t, out, want...)
}

func errorsAs(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

func newOVPacketLab(t *testing.T, l *lab, offloadDev string) ovPacketLab {
	t.Helper()
	dir := t.TempDir()
	o := ovPacketLab{a: l.netns(t), b: l.netns(t), af: filepath.Join(dir, "a.yaml"), bf: filepath.Join(dir, "b.yaml")}
	for _, ns := range []string{o.a, o.b} {
		// No IPv6 control traffic on the wire: every IP frame counted is the overlay's.
		nsRun(t, ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
	l.nicPairNamed(t, o.a, "a0", o.b, "b0")
	l.nicPairNamed(t, o.a, "a1", o.b, "b1")
	o.ob0, o.ob1 = testutil.NicWireOracle(t, o.b, "b0"), testutil.NicWireOracle(t, o.b, "b1")
	o.b0Stats, o.b1Stats, o.wireChecked = ethStats(t, o.b, "b0"), ethStats(t, o.b, "b1"), new(bool)
	t.Cleanup(func() { o.checkWire(t) })
	ovWrite(t, filepath.Join(dir, "a.keys"), "peer out "+ovKeyAB+"\npeer in "+ovKeyBA+"\n", 0o600)
	ovWrite(t, filepath.Join(dir, "b.keys"), "peer out "+ovKeyBA+"\npeer in "+ovKeyAB+"\n", 0o600)
	ovWrite(t, o.af, ovPacketHost("a", [2]string{"a0", "a1"}, 1, 2, "0x1001", "0x2001", offloadDev), 0o644)
	ovWrite(t, o.bf, ovPacketHost("b", [2]string{"b0", "b1"}, 2, 1, "0x2001", "0x1001", ""), 0o644)
	return o
}

// ping sends n pings from A's overlay address to B's and reports whether all came back.
func (o ovPacketLab) ping(t *testing.T, n int) (string, bool) {
	t.Helper()
	out, err := try("ip", "netns", "exec", o.a, "ping", "-c", fmt.Sprint(n), "-i", "0.2", "-W", "2", "192.168.90.2")
	return out, err == nil
}

// wire is the frames B's two ports received not as ESP (nor as link
// control) since the lab began, as the captures saw them: what crossed
// the wire unencrypted.
func (o ovPacketLab) wire(t *testing.T) uint64 {
	t.Helper()
	return uint64(len(o.ob0.Leaks(t, 0, testutil.Flow{})) + len(o.ob1.Leaks(t, 0, testutil.Flow{})))
}

// TestOverlayPacketOffloadBond runs seed 000's layout under each driver
// profile: on mlx5 (both profiles) a non-ESN SA moved to the other port
// restarts at sequence 1 and the peer's window drops it, so the test
// relies on sluice's default (offload packet turns ESN on) for its moves.
func TestOverlayPacketOffloadBond(t *testing.T) {
	for _, prof := range packetProfiles() {
		t.Run(prof, func(t *testing.T) {
			testutil.UseNicmodelProfile(t, prof)
			overlayPacketOffloadBond(t)
		})
	}
}

func overlayPacketOffloadBond(t *testing.T) {
	l := newLab(t)
	o := newOVPacketLab(t, l, "a0")
	step(t, "plan: packet offload on a port of the bond, with the failover warning; ESN on by default", func(t *testing.T) {
		out := ovMust(t, o.a, "plan", "-f", o.af)
		t.Logf("%s", out)
		mustContain(t, out, "offload packet dev a0", "Accepted by accept-leaks: cleartext-accepted-on-offloaded-in",
			"esn: true, the default with offload packet")
	})
	step(t, "apply both hosts", func(t *testing.T) {
		t.Logf("%s", ovMust(t, o.a, "apply", "-f", o.af))
		ovMust(t, o.b, "apply", "-f", o.bf)
		sas := run(t, ipPacket(t), "-n", o.a, "xfrm", "state")
		pols := run(t, ipPacket(t), "-n", o.a, "xfrm", "policy")
		t.Logf("A's SAs:\n%s\nA's policies:\n%s", sas, pols)
		mustContain(t, sas, "crypto offload parameters: dev a0 dir out mode packet", "crypto offload parameters: dev a0 dir in mode packet")
		mustContain(t, pols, "crypto offload parameters: dev a0 mode packet")
		if n := ethStats(t, o.a, "a0")["ipsec_sa_count"]; n != 2 {
			t.Fatalf("a0 holds %d SAs, want 2", n)
		}
	})
	step(t, "the model encrypts and decrypts, the wire carries ESP only", func(t *testing.T) {
		a0, w := ethStats(t, o.a, "a0"), o.wire(t)
		if out, ok := o.ping(t, 5); !ok {
			t.Fatalf("ping across the overlay:\n%s", out)
		}
		d := statDelta(a0, ethStats(t, o.a, "a0"), "tx_ipsec_packets", "rx_ipsec_packets", "tx_cleartext_packets")
		t.Logf("a0: %v", d)
		if d["tx_ipsec_packets"] < 5 || d["rx_ipsec_packets"] < 5 {
			t.Fatalf("a0 encrypted %d and decrypted %d packets for 5 pings", d["tx_ipsec_packets"], d["rx_ipsec_packets"])
		}
		if leak := o.wire(t) - w; leak != 0 {
			t.Fatalf("%d cleartext IP packets crossed the wire", leak)
		}
	})
	step(t, "verify --traffic: the SAs count and the model's counters rise; a second apply has nothing to do", func(t *testing.T) {
		out := ovMust(t, o.a, "verify", "-f", o.af, "--traffic", "--window", "2s", "--send-to", "192.168.90.2")
		t.Logf("%s", out)
		mustContain(t, out, "offload packet on a0 as asked", "tx_ipsec_packets", "rx_ipsec_packets", "nothing to apply")
	})
	failover(t, o)
}

// failover is what 6.12 does with seed 000's packet-offloaded SAs when
// the bond fails over, what sluice says about it, and the fix.
func failover(t *testing.T, o ovPacketLab) {
	step(t, "carrier loss: the bond fails over to a1, the SAs stay on a0, the traffic leaves a1 in cleartext", func(t *testing.T) {
		run(t, "ip", "-n", o.b, "link", "set", "b0", "down")
		waitActive(t, o.a, "a1")
		waitActive(t, o.b, "b1")
		a1 := ethStats(t, o.a, "a1")
		leak := o.leaks(t)
		d := statDelta(a1, ethStats(t, o.a, "a1"), "tx_cleartext_packets", "tx_ipsec_packets")
		t.Logf("after the failover: wire %d cleartext, a1 %v", leak, d)
		if leak < 3 || d["tx_cleartext_packets"] < 3 || d["tx_ipsec_packets"] != 0 {
			t.Fatalf("6.12 after a failover: want a1 to send the pings in cleartext; wire %d, a1 %v", leak, d)
		}
		mustContain(t, run(t, ipPacket(t), "-n", o.a, "xfrm", "state"), "dev a0 dir out mode packet")
	})
	step(t, "doctor and verify fail: the SAs are on the inactive port", func(t *testing.T) {
		r, _ := doctor(t, o.a, "--check", "bond-port-offload")
		res := result(t, r, "bond-port-offload", "a0")
		wantVerdict(t, res, diag.Fail, "2 packet-offloaded SA(s) on a0, but bond0's active port is a1")
		mustContain(t, res.Fix, "offload-dev: bond0")
		o.verifyFails(t, "packet-offloaded to a0, but bond0's active port is a1", "its traffic leaves a1 in cleartext", "set offload-dev: bond0")
	})
	step(t, "offload-dev: bond0: apply moves the SAs to the active port", func(t *testing.T) {
		o.useOffloadDev(t, "bond0")
		// Re-created with the same manual key: the sequence numbers carry
		// over (no --force: the key ledger lets a carried SA through).
		out := ovMust(t, o.a, "apply", "-f", o.af)
		t.Logf("%s", out)
		mustContain(t, out, "replace SA out", "offload packet on a1")
		sas := run(t, ipPacket(t), "-n", o.a, "xfrm", "state")
		t.Logf("%s", sas)
		mustContain(t, sas, "dev a1 dir out mode packet", "dev a1 dir in mode packet", "oseq 0x1000")
		o.encrypts(t, "a1")
		ovMust(t, o.a, "verify", "-f", o.af)
	})
	step(t, "fail back to a0: verify fails, apply moves them back", func(t *testing.T) {
		run(t, "ip", "-n", o.b, "link", "set", "b0", "up")
		waitActive(t, o.a, "a0")
		waitActive(t, o.b, "b0")
		o.verifyFails(t, "packet-offloaded to a1, but bond0's active port is a0", "run sluice apply: it moves them to a0")
		ovMust(t, o.a, "apply", "-f", o.af)
		o.encrypts(t, "a0")
	})
	step(t, "a0 taken down: the kernel flushes its SAs and policies, the traffic leaves in cleartext; apply restores", func(t *testing.T) {
		run(t, "ip", "-n", o.a, "link", "set", "a0", "down")
		waitActive(t, o.a, "a1")
		waitActive(t, o.b, "b1")
		if s := run(t, ipPacket(t), "-n", o.a, "xfrm", "policy"); strings.Contains(s, "192.168.80.2/32") {
			t.Fatalf("a packet-offloaded policy survived its port going down (a kernel without xfrm_dev_down's flush?): update docs/overlay.md\n%s", s)
		}
		if leak := o.leaks(t); leak < 3 {
			t.Fatalf("with the policies flushed: %d cleartext packets on the wire, want the pings", leak)
		}
		// The kernel deleted the SAs and their sequence numbers: the same
		// key again would repeat them (and the peer's replay window, which
		// the carried numbers moved on, would drop them): apply says so.
		out, err := ovSluice(t, o.a, "apply", "-f", o.af)
		if err == nil || !strings.Contains(out, "was installed before") {
			t.Fatalf("apply re-installing flushed SAs with the same key: %v\n%s", err, out)
		}
		// New keys on both ends, as the refusal says.
		dir := filepath.Dir(o.af)
		ovWrite(t, filepath.Join(dir, "a.keys"), "peer out "+ovKeyBA+"\npeer in "+ovKeyAB+"\n", 0o600)
		ovWrite(t, filepath.Join(dir, "b.keys"), "peer out "+ovKeyAB+"\npeer in "+ovKeyBA+"\n", 0o600)
		ovMust(t, o.b, "apply", "-f", o.bf)
		ovMust(t, o.a, "apply", "-f", o.af)
		o.encrypts(t, "a1")
	})
	step(t, "teardown removes the packet-offloaded SAs and policies", func(t *testing.T) {
		ovMust(t, o.a, "teardown", "-f", o.af)
		if s := run(t, ipPacket(t), "-n", o.a, "xfrm", "state"); s != "" {
			t.Fatalf("SAs left after teardown:\n%s", s)
		}
	})
}
