// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"testing"
)

// TestNicmodelBondPortFailover is seed 000's layout with packet offload,
// which netdevsim could not show: transport-mode SAs and policies
// packet-offloaded to one port (a0) of an active-backup bond, then a
// failover to a1. It pins what Linux 6.12 does with the host's own
// traffic (docs/overlay.md): the bond moves no SA or policy it did not
// add itself, and the xfrm core hands packet-offloaded traffic to the
// route's device (now a1) without encrypting it, so a1, which holds no
// policy, sends it in cleartext: a leak on the wire. If a kernel changes
// that, this test fails and docs/overlay.md needs the new answer.
func TestNicmodelBondPortFailover(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	nsA, nsB := l.netns(t), l.netns(t)
	l.nicPairNamed(t, nsA, "a0", nsB, "b0")
	l.nicPairNamed(t, nsA, "a1", nsB, "b1")
	for _, e := range [][4]string{{nsA, "a0", "a1", "192.168.80.1/24"}, {nsB, "b0", "b1", "192.168.80.2/24"}} {
		ns := e[0]
		run(t, "ip", "-n", ns, "link", "add", "bond0", "type", "bond", "mode", "active-backup", "miimon", "100", "primary", e[1])
		for _, p := range []string{e[1], e[2]} {
			nsRun(t, ns, "sysctl", "-qw", "net.ipv6.conf."+p+".disable_ipv6=1")
			run(t, "ip", "-n", ns, "link", "set", p, "down")
			run(t, "ip", "-n", ns, "link", "set", p, "master", "bond0")
		}
		nsRun(t, ns, "sysctl", "-qw", "net.ipv6.conf.bond0.disable_ipv6=1")
		run(t, "ip", "-n", ns, "link", "set", "bond0", "up")
		run(t, "ip", "-n", ns, "addr", "add", e[3], "dev", "bond0")
	}
	waitActive(t, nsA, "a0")
	waitActive(t, nsB, "b0")
	run(t, "ip", "-n", nsA, "neigh", "replace", "192.168.80.2", "lladdr", macOf(t, nsB, "bond0"), "dev", "bond0", "nud", "permanent")
	run(t, "ip", "-n", nsB, "neigh", "replace", "192.168.80.1", "lladdr", macOf(t, nsA, "bond0"), "dev", "bond0", "nud", "permanent")

	h := nmHosts{linkA: "192.168.80.1", linkB: "192.168.80.2", plen: "32"}
	h.install(t, ip, nsA, "a0", nsB, nmSetup{keyAB: nmKeyAB, keyBA: nmKeyBA, bKeyAB: nmKeyAB, bKeyBA: nmKeyBA})

	step(t, "a0 active: the port encrypts", func(t *testing.T) {
		before := ethStats(t, nsA, "a0")
		if out, ok := h.ping(t, nsA, 3); !ok {
			t.Fatalf("ping over the bond with the SA on its active port:\n%s", out)
		}
		if d := statDelta(before, ethStats(t, nsA, "a0"), "tx_ipsec_packets", "rx_ipsec_packets"); d["tx_ipsec_packets"] < 3 || d["rx_ipsec_packets"] < 3 {
			t.Fatalf("a0: %v, want >= 3 encrypted and decrypted", d)
		}
	})
	step(t, "failover to a1: what 6.12 does", func(t *testing.T) {
		// A carrier loss, not a port down (which would flush a0's SAs).
		run(t, "ip", "-n", nsB, "link", "set", "b0", "down")
		waitActive(t, nsA, "a1")
		waitActive(t, nsB, "b1")
		a1, b1 := ethStats(t, nsA, "a1"), ethStats(t, nsB, "b1")
		out, ok := h.ping(t, nsA, 3)
		da1 := statDelta(a1, ethStats(t, nsA, "a1"), "tx_ipsec_packets", "tx_cleartext_packets", "tx_ipsec_drop_no_state")
		db1 := statDelta(b1, ethStats(t, nsB, "b1"), "rx_cleartext_packets")
		sas := run(t, ip, "-n", nsA, "xfrm", "state")
		t.Logf("after failover: ping ok=%v; a1 %v; b1 (wire) %v", ok, da1, db1)
		if ok || da1["tx_cleartext_packets"] < 3 || da1["tx_ipsec_packets"] != 0 || db1["rx_cleartext_packets"] < 3 {
			t.Fatalf("6.12 after a failover from the SA's port: want the pings sent in cleartext by a1 and lost; got ping ok=%v, a1 %v, wire %v\n%s\n%s",
				ok, da1, db1, out, sas)
		}
	})
}
