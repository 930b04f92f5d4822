// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"strings"
	"testing"
	"time"

	"sluice/internal/testutil"
)

// The driver profiles of the NIC model (kmod/nicmodel/README.md, "Driver
// profiles"): each test proves one row of the table on the wire, through
// the wire oracle (a capture on the tap of B's port), not the
// model's counters. These tests assert the driver's behaviour: a leak
// they expect is the proof that mlx5 in 6.12 leaks.

var nmProfiles = []string{testutil.ProfileMlx5_612, testutil.ProfileMlx5Upstream}

// nmProfileHosts is an IPv4 tunnel-mode pair of hosts under a profile,
// with the oracle on B's port and A's link-local chatter off.
func nmProfileHosts(t *testing.T, l *lab, profile string) (nmHosts, *testutil.WireOracle) {
	t.Helper()
	testutil.UseNicmodelProfile(t, profile)
	h := l.newNMHosts(t, false, true)
	nsRun(t, h.nsA, "sysctl", "-qw", "net.ipv6.conf."+h.devA+".disable_ipv6=1")
	nsRun(t, h.nsB, "sysctl", "-qw", "net.ipv6.conf."+h.devB+".disable_ipv6=1")
	return h, testutil.NicWireOracle(t, h.nsB, h.devB)
}

// TestNicmodelProfileSubnetSelector (row 1): A's OUT policy selects
// 10.71.0.0/16 -> 10.72.0.0/16; A pings from 10.71.0.1 to 10.72.0.1.
// mlx5 in 6.12 matches the selector's addresses exactly (setup_fte_addr4
// sets an all-ones mask), so the pings miss the device's policy table and
// leave in cleartext although the kernel handed them to the device for
// encryption; upstream matches the prefix and encrypts.
func TestNicmodelProfileSubnetSelector(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	for _, prof := range nmProfiles {
		t.Run(prof, func(t *testing.T) {
			h, oracle := nmProfileHosts(t, l, prof)
			s := nmKeys()
			s.skipAOutPolicy = true
			h.install(t, ip, s)
			run(t, ip, "-n", h.nsA, "xfrm", "policy", "add", "src", "10.71.0.0/16", "dst", "10.72.0.0/16", "dir", "out",
				"tmpl", "src", h.linkA, "dst", h.linkB, "proto", "esp", "reqid", "1", "mode", "tunnel",
				"offload", "packet", "dev", h.devA)
			m, a0, b0 := oracle.Drain(t), ethStats(t, h.nsA, h.devA), ethStats(t, h.nsB, h.devB)
			out, ok := h.ping(t, 3)
			flow := testutil.FlowOf("10.71.0.1", "10.72.0.1")
			leaks := oracle.Leaks(t, m, flow)
			d := statDelta(a0, ethStats(t, h.nsA, h.devA), "tx_ipsec_packets", "tx_cleartext_packets")
			t.Logf("%s: wire %s; A %v", prof, testutil.Tally(oracle.Since(m), flow), d)
			if prof == testutil.ProfileMlx5_612 {
				if len(leaks) < 3 || ok || d["tx_ipsec_packets"] != 0 {
					t.Errorf("mlx5-6.12, /16 selector, pings to a host of the subnet: want >= 3 cleartext frames on the wire and no ESP; got %d, ping ok %v, A %v",
						len(leaks), ok, d)
				}
			} else {
				oracle.NoCleartext(t, m, flow, "mlx5-upstream, /16 selector")
				if !ok || d["tx_ipsec_packets"] < 3 {
					t.Errorf("mlx5-upstream: the pings must be encrypted and answered: A %v\n%s", d, out)
				}
			}
			testutil.WireAgrees(t, oracle, m, h.nsB, h.devB, b0)
		})
	}
}

// nmMirred gives A a second source, 10.71.9.1 in a namespace of its own
// (its kernel has no xfrm policy), whose frames tc on A's veth end mirreds
// into A's model port: frames that reach the device without A's kernel
// xfrm (as XDP's do), so only the device's tables decide. send pings B's
// end from it with extra ping arguments.
func nmMirred(t *testing.T, l *lab, h nmHosts, actions ...string) (send func(n string, extra ...string)) {
	t.Helper()
	_, eb := h.ends()
	nsC := l.netns(t)
	veth(t, nsC, "vc", "10.71.9.1/24", h.nsA, "vg", "")
	run(t, "tc", "-n", h.nsA, "qdisc", "add", "dev", "vg", "clsact")
	args := []string{"-n", h.nsA, "filter", "add", "dev", "vg", "ingress", "matchall",
		"action", "pedit", "ex", "munge", "eth", "dst", "set", macOf(t, h.nsB, h.devB), "pipe"}
	args = append(args, actions...)
	run(t, "tc", append(args, "action", "mirred", "egress", "redirect", "dev", h.devA)...)
	run(t, "ip", "-n", nsC, "route", "add", eb+"/32", "dev", "vc")
	run(t, "ip", "-n", nsC, "neigh", "replace", eb, "lladdr", "02:00:00:00:00:01", "dev", "vc", "nud", "permanent")
	return func(n string, extra ...string) {
		a := append([]string{"netns", "exec", nsC, "ping", "-c", n, "-i", "0.2", "-W", "1", "-I", "10.71.9.1"}, extra...)
		_, _ = try("ip", append(a, eb)...)
	}
}

// nmMirredPolicy is an offloaded OUT policy on A for the mirred source.
func nmMirredPolicy(t *testing.T, ip string, h nmHosts, reqid string) {
	t.Helper()
	_, eb := h.ends()
	run(t, ip, "-n", h.nsA, "xfrm", "policy", "add", "src", "10.71.9.1/32", "dst", eb+"/32", "dir", "out",
		"tmpl", "src", h.linkA, "dst", h.linkB, "proto", "esp", "reqid", reqid, "mode", "tunnel",
		"offload", "packet", "dev", h.devA)
}

// TestNicmodelProfileDeviceMisses: what the device sends in cleartext
// although an offloaded OUT policy selects it, proven on the wire under
// the profile the suite runs (both profiles agree on these rows):
//   - row 2: the policy's SA is missing (no miss rule in the TX SA table);
//   - row 6: a template with reqid 0 (no reg_c_4, no SA matches);
//   - row 3: IPv4 fragments (every rule carries setup_fte_no_frags).
//
// And two of the model's own defects, fixed: VLAN-tagged frames are
// encrypted (tag kept) and counted, no longer passed as "non-IP".
func TestNicmodelProfileDeviceMisses(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	_, eb := (nmHosts{tunnel: true, innerA: "10.71.0.1", innerB: "10.72.0.1"}).ends()
	flow := testutil.FlowOf("10.71.9.1", eb)
	t.Run("row 2: no SA under the policy, the frames leave in cleartext", func(t *testing.T) {
		h, oracle := nmProfileHosts(t, l, testutil.ProfileMlx5_612)
		h.install(t, ip, nmKeys())
		send := nmMirred(t, l, h)
		nmMirredPolicy(t, ip, h, "7") // no SA has reqid 7
		m, a0 := oracle.Drain(t), ethStats(t, h.nsA, h.devA)
		send("3")
		d := statDelta(a0, ethStats(t, h.nsA, h.devA), "tx_ipsec_drop_no_state", "tx_cleartext_packets")
		if n := len(oracle.Leaks(t, m, flow)); n < 3 || d["tx_ipsec_drop_no_state"] < 3 {
			t.Errorf("policy without SA: %d cleartext frames on the wire, A %v; want >= 3 (mlx5 sends them on)", n, d)
		}
		// The override drops them instead (the model before profiles).
		run(t, "sh", "-c", "echo 0 > /sys/module/nicmodel/parameters/tx_miss_cleartext")
		defer run(t, "sh", "-c", "echo -1 > /sys/module/nicmodel/parameters/tx_miss_cleartext")
		m = oracle.Drain(t)
		send("3")
		oracle.NoCleartext(t, m, flow, "tx_miss_cleartext=0")
	})
	t.Run("row 6: a reqid 0 template meets no SA, cleartext", func(t *testing.T) {
		h, oracle := nmProfileHosts(t, l, testutil.ProfileMlx5_612)
		h.install(t, ip, nmKeys())
		send := nmMirred(t, l, h)
		nmMirredPolicy(t, ip, h, "0")
		m := oracle.Drain(t)
		send("3")
		if n := len(oracle.Leaks(t, m, flow)); n < 3 {
			t.Errorf("reqid 0 template: %d cleartext frames on the wire, want >= 3 (%s)", n, testutil.Tally(oracle.Since(m), flow))
		}
	})
	t.Run("row 3: fragments leave in cleartext, whole packets as ESP", func(t *testing.T) {
		h, oracle := nmProfileHosts(t, l, testutil.ProfileMlx5_612)
		h.install(t, ip, nmKeys())
		send := nmMirred(t, l, h)
		nmMirredPolicy(t, ip, h, "1")
		m := oracle.Drain(t)
		send("2", "-s", "2000") // two fragments each on vc's 1,500 bytes
		var frag, esp int
		for _, f := range oracle.Leaks(t, m, flow) {
			if f.Fragment {
				frag++
			}
		}
		for _, f := range oracle.Since(m) {
			if f.Class == testutil.ESP {
				esp++
			}
		}
		if frag < 4 || esp != 0 {
			t.Errorf("fragmented pings: %d cleartext fragments and %d ESP frames on the wire, want >= 4 and 0", frag, esp)
		}
		m = oracle.Drain(t)
		send("2")
		oracle.NoCleartext(t, m, flow, "unfragmented pings")
	})
	t.Run("VLAN-tagged frames are encrypted, tag kept, and counted", func(t *testing.T) {
		h, oracle := nmProfileHosts(t, l, testutil.ProfileMlx5_612)
		h.install(t, ip, nmKeys())
		send := nmMirred(t, l, h, "action", "vlan", "push", "id", "5", "pipe")
		nmMirredPolicy(t, ip, h, "1")
		m, a0 := oracle.Drain(t), ethStats(t, h.nsA, h.devA)
		send("3")
		d := statDelta(a0, ethStats(t, h.nsA, h.devA), "tx_ipsec_packets", "tx_non_ip_packets")
		var tagged int
		for _, f := range oracle.Frames(t, m) {
			if f.Class == testutil.ESP && f.VLANs == 1 {
				tagged++
			}
		}
		oracle.NoCleartext(t, m, flow, "tagged pings")
		if tagged < 3 || d["tx_ipsec_packets"] < 3 || d["tx_non_ip_packets"] != 0 {
			t.Errorf("tagged frames: %d tagged ESP frames on the wire, A %v; want >= 3 encrypted, none counted non-IP", tagged, d)
		}
	})
}

// TestNicmodelProfileSASelection (row 5): mlx5's TX SA rule matches the
// reqid only. A second OUT SA of a reqid is a pending duplicate: the
// first stays in use until deleted; a third is refused.
func TestNicmodelProfileSASelection(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	h, oracle := nmProfileHosts(t, l, testutil.ProfileMlx5_612)
	h.install(t, ip, nmKeys())
	ea, eb := h.ends()
	flow := testutil.FlowOf(h.linkA, h.linkB)
	outSA := func(spi string) []string {
		return append(append([]string{"-n", h.nsA}, h.stateArgs(nmSA{h.linkA, h.linkB, spi, "1", nmKeyAB, nil})...),
			"offload", "packet", "dev", h.devA, "dir", "out")
	}
	spis := func() map[uint32]int {
		m := oracle.Drain(t)
		if _, ok := h.ping(t, 3); !ok {
			t.Errorf("ping %s -> %s failed", ea, eb)
		}
		n := map[uint32]int{}
		for _, f := range oracle.Frames(t, m) {
			if flow.Has(f) && f.Class == testutil.ESP {
				n[f.SPI]++
			}
		}
		return n
	}
	run(t, ip, outSA("0x1002")...)
	run(t, ip, append([]string{"-n", h.nsB}, h.stateArgs(nmSA{h.linkA, h.linkB, "0x1002", "1", nmKeyAB, []string{"replay-window", "64"}})...)...)
	if n := spis(); n[0x1001] < 3 || n[0x1002] != 0 {
		t.Errorf("with a second SA of reqid 1: ESP by SPI %v, want the first (0x1001) only", n)
	}
	if out, err := try(ip, outSA("0x1003")...); err == nil || !strings.Contains(out, "single duplicate") {
		t.Errorf("a third OUT SA of reqid 1: %v %s, want refused (only one duplicate rule)", err, out)
	}
	run(t, ip, "-n", h.nsA, "xfrm", "state", "delete", "src", h.linkA, "dst", h.linkB, "proto", "esp", "spi", "0x1001")
	if n := spis(); n[0x1002] < 3 || n[0x1001] != 0 {
		t.Errorf("after deleting the first: ESP by SPI %v, want the pending one (0x1002) only", n)
	}
}

// TestNicmodelProfileSequence (row 7): a non-ESN SA starts at sequence 1
// whatever oseq it was added with (mlx5e_xfrm_add_state), and keeps no
// replay window (programmed only with ESN); with ESN both hold.
func TestNicmodelProfileSequence(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	step(t, "non-ESN SA added with oseq 0x1000 sends sequence 1", func(t *testing.T) {
		h, oracle := nmProfileHosts(t, l, testutil.ProfileMlx5_612)
		s := nmKeys()
		s.aOutX = []string{"replay-oseq", "0x1000"}
		h.install(t, ip, s)
		m := oracle.Drain(t)
		_, _ = h.ping(t, 2)
		oracle.Drain(t)
		var first uint32
		for _, f := range oracle.Since(m) {
			if f.Class == testutil.ESP && f.SPI == 0x1001 {
				first = f.Seq
				break
			}
		}
		if first != 1 {
			t.Errorf("first ESP sequence number on the wire: %d, want 1 (mlx5 ignores oseq without ESN)", first)
		}
	})
	// With ESN the window holds: TestNicmodelReplay.
	step(t, "non-ESN: replays accepted, no window in the device", func(t *testing.T) {
		h, _ := nmProfileHosts(t, l, testutil.ProfileMlx5_612)
		h.install(t, ip, nmKeys())
		st := replayFirstReply(t, h)
		if st["rx_ipsec_drop_replay"] != 0 || st["rx_ipsec_packets"] != 5 {
			t.Errorf("3 replies and 2 replays of the first: rx_ipsec_drop_replay %d, rx_ipsec_packets %d; want 0 and 5 (mlx5: anti-replay only with ESN)",
				st["rx_ipsec_drop_replay"], st["rx_ipsec_packets"])
		}
	})
}

// TestNicmodelProfileOffloadOK (row 4): the device refuses IPv4 options
// (mlx5e_ipsec_offload_ok): the kernel drops such packets of a
// packet-offloaded SA, nothing of them reaches the wire.
func TestNicmodelProfileOffloadOK(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	h, oracle := nmProfileHosts(t, l, testutil.ProfileMlx5_612)
	h.install(t, ip, nmKeys())
	ea, eb := h.ends()
	m, a0 := oracle.Drain(t), ethStats(t, h.nsA, h.devA)
	out, err := try("ip", "netns", "exec", h.nsA, "ping", "-R", "-c", "2", "-i", "0.2", "-W", "1", "-I", ea, eb)
	d := statDelta(a0, ethStats(t, h.nsA, h.devA), "tx_ipsec_packets", "tx_cleartext_packets")
	c := testutil.Tally(oracle.Frames(t, m), testutil.FlowOf(h.linkA, h.linkB))
	if err == nil || d["tx_ipsec_packets"] != 0 || c[testutil.ESP] != 0 {
		t.Errorf("pings with IPv4 options: %v, A %v, wire %s; want none sent (the kernel drops what offload_ok refuses)\n%s",
			err, d, c, out)
	}
	oracle.NoCleartext(t, m, testutil.FlowOf(ea, eb), "pings with IPv4 options")
	if _, ok := h.ping(t, 2); !ok {
		t.Errorf("pings without options must still pass")
	}
}

// replayFirstReply has B send A's first reply frame twice more (as
// TestNicmodelReplay) and returns A's counters after 3 pings.
func replayFirstReply(t *testing.T, h nmHosts) map[string]uint64 {
	t.Helper()
	stop := startReplay(t, h)
	if pout, ok := h.ping(t, 3); !ok {
		t.Fatalf("ping: %s", pout)
	}
	stop()
	time.Sleep(300 * time.Millisecond)
	return ethStats(t, h.nsA, h.devA)
}
