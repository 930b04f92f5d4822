// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"net/netip"
	"strings"
	"testing"

	"sluice/internal/fastpath"
	"sluice/internal/flower"
	"sluice/internal/testutil"
)

// TestFlowerHardwareRulesOnModel runs the production install path: the
// probe and the installer with skip_sw, on a device that takes hardware
// rules. The gateway's cleartext port p0 is a NIC model port (no IPsec on
// it); the model accepts the tier's rules (match keys and actions as the
// tier emits them), executes them on p0's receive path and redirects into
// the model port wan0, whose offloaded OUT policies and SAs encrypt. The
// rules' counters are the device's (in_hw, `tc -s filter show`); the
// software never sees a packet (skip_sw, kernel forwarding off). The
// EBUSY rule holds both ways: wan0, which holds IPsec offload, refuses
// the probe, and p0, which holds rules, refuses an offloaded SA. Under
// each mlx5 profile (newFlowerLabOn).
func TestFlowerHardwareRulesOnModel(t *testing.T) {
	underEachProfile(t, testFlowerHardwareRulesOnModel)
}

func testFlowerHardwareRulesOnModel(t *testing.T, profile string) {
	l := newLab(t)
	f := newFlowerLabOn(t, l, profile, true)
	f.dropSAMisses(t, l)
	fs := openTC(t, f.gw)
	inst := &flower.Installer{FS: fs} // skip_sw: the production path
	res := f.derive()
	if len(res.Rules) != 6 || len(res.Skips) != 0 {
		t.Fatalf("want 2 forwards and 4 guards, got %d rules, skips %v", len(res.Rules), res.Skips)
	}
	step(t, "the probe: p0 takes skip_sw rules; wan0, holding IPsec offload, answers EBUSY", func(t *testing.T) {
		if p := flower.Probe(fs, f.p0, 0); !p.OK {
			t.Fatalf("the model refused the probe on p0: %+v", p)
		}
		run(t, "tc", "-n", f.gw, "qdisc", "add", "dev", "wan0", "clsact")
		p := flower.Probe(fs, f.wan, 0)
		if p.OK || !p.Busy || !strings.Contains(p.Msg, "IPsec offload is active") {
			t.Fatalf("wan0 holds packet-offloaded SAs, the probe must meet EBUSY: %+v", p)
		}
		t.Logf("wan0: %s", p.Msg)
	})
	step(t, "what the model cannot do is refused with its reason, as mlx5 refuses", func(t *testing.T) {
		for _, c := range []struct{ what, want string }{
			{"ip_tos 0x10 action drop", "Unsupported match on TOS"},
			{"dst_ip 48.0.0.1 action skbedit mark 1", "Unsupported action"},
		} {
			out, err := try("tc", append([]string{"-n", f.gw, "filter", "add", "dev", "p0", "ingress", "protocol", "ip", "pref", "100",
				"flower", "skip_sw"}, strings.Fields(c.what)...)...)
			if err == nil || !strings.Contains(out, c.want) {
				t.Fatalf("%s: want a refusal with %q, got %v:\n%s", c.what, c.want, err, out)
			}
		}
	})
	step(t, "install with skip_sw: every rule in hardware", func(t *testing.T) {
		st, errs, err := inst.Apply(res.Rules)
		if err != nil || len(errs) != 0 || st.Added != 6 {
			t.Fatalf("apply: %+v %v %v", st, errs, err)
		}
		out := run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress")
		if n := strings.Count(out, "skip_sw"); n != 6 || strings.Count(out, "in_hw_count 1") != 6 || strings.Contains(out, "not_in_hw") {
			t.Fatalf("want 6 skip_sw rules in hardware:\n%s", out)
		}
		if n := testutil.EthStats(t, f.gw, "p0")["tc_rule_count"]; n != 6 {
			t.Fatalf("the model holds %d rules, want 6", n)
		}
	})
	step(t, "an offloaded SA on p0, which holds rules: EBUSY", func(t *testing.T) {
		out, err := try(f.ip, "-n", f.gw, "xfrm", "state", "add", "src", "10.0.0.254", "dst", "10.0.0.1", "proto", "esp", "spi", "0x9999",
			"reqid", "99", "mode", "transport", "aead", "rfc4106(gcm(aes))", labKey, "128", "offload", "packet", "dev", "p0", "dir", "out")
		if err == nil || !strings.Contains(out, "tc rules are offloaded") {
			t.Fatalf("an SA went onto a port with hardware rules: %v\n%s", err, out)
		}
	})
	recv4 := listenUDP(t, f.b, "48.0.0.1:9999")
	recv6 := listenUDP(t, f.b, "[2001:db8:48::1]:9999")
	enc0, wire0, p00 := f.encrypted(t), f.wireMark(t), testutil.EthStats(t, f.gw, "p0")
	step(t, "the device forwards: tag popped, TTL 63, MACs rewritten, into wan0, encrypted", func(t *testing.T) {
		sendUDP(t, f.a, netip.MustParseAddr("48.0.0.1"), 9999, 64, 3)
		sendUDP(t, f.a, netip.MustParseAddr("2001:db8:48::1"), 9999, 64, 3)
		if n4, n6 := recv4(), recv6(); n4 != 3 || n6 != 3 {
			t.Fatalf("b received %d and %d of 3; p0: %v\n%s", n4, n6, testutil.EthStats(t, f.gw, "p0"),
				run(t, "tc", "-n", f.gw, "-s", "filter", "show", "dev", "p0", "ingress"))
		}
		if n := pktCount(t, f.b, "wan0", "10") + pktCount(t, f.b, "wan0", "11"); n != 6 {
			t.Fatalf("b counted %d decrypted TTL-63 packets under the gateway's MAC, want 6", n)
		}
		if n := f.encrypted(t) - enc0; n != 6 {
			t.Fatalf("the model encrypted %d of 6", n)
		}
		if d := testutil.StatDelta(p00, testutil.EthStats(t, f.gw, "p0"), "rx_tc_redirect"); d["rx_tc_redirect"] != 6 {
			t.Fatalf("p0: %v, want 6 redirected by the device", d)
		}
	})
	step(t, "the rules' hardware counters: tc -s sees them", func(t *testing.T) {
		if n := pktCount(t, f.gw, "p0", "49004"); n != 3 {
			t.Fatalf("the IPv4 forward's counter: %d, want 3\n%s", n, run(t, "tc", "-n", f.gw, "-s", "filter", "show", "dev", "p0", "ingress"))
		}
		mustContain(t, run(t, "tc", "-n", f.gw, "-s", "filter", "show", "dev", "p0", "ingress", "pref", "49004"), "Sent hardware")
	})
	step(t, "TTL 1: the guard passes it to the host", func(t *testing.T) {
		p0 := testutil.EthStats(t, f.gw, "p0")
		sendUDP(t, f.a, netip.MustParseAddr("48.0.0.1"), 9999, 1, 2)
		if n := recv4(); n != 0 {
			t.Fatalf("b received %d TTL-1 packets", n)
		}
		// (>=: the neighbour discovery a may send meanwhile meets the
		// ICMP guard too.)
		if d := testutil.StatDelta(p0, testutil.EthStats(t, f.gw, "p0"), "rx_packets", "rx_tc_hits", "rx_tc_redirect"); d["rx_packets"] < 2 || d["rx_tc_hits"] < 2 || d["rx_tc_redirect"] != 0 {
			t.Fatalf("p0: %v, want both matched and handed to the host", d)
		}
		if n := pktCount(t, f.gw, "p0", "49001"); n < 2 {
			t.Fatalf("the TTL guard counted %d, want >= 2", n)
		}
	})
	step(t, "police by packet rate in the device: one packet a second to the host (use times)", func(t *testing.T) {
		if _, errs, err := inst.Apply(nil); err != nil || len(errs) != 0 {
			t.Fatalf("remove: %v %v", errs, err)
		}
		withUse := flower.Derive(flower.Input{Views: fastpath.PolicyViews(f.snap), Ports: f.ports, Router: f.router, InboundChain: 1, UseTime: true, Quirks: f.quirks})
		if _, errs, err := inst.Apply(withUse.Rules); err != nil || len(errs) != 0 {
			t.Fatalf("apply with use times: %v %v", errs, err)
		}
		mustContain(t, run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress", "pref", "49004"), "pkts_rate 1", "in_hw")
		checkUseTimePolice(t, f, netip.MustParseAddr("48.0.0.1"), 9997)
		if _, errs, err := inst.Apply(res.Rules); err != nil || len(errs) != 0 {
			t.Fatalf("back to the rules without use times: %v %v", errs, err)
		}
	})
	step(t, "the wire carried ESP only", func(t *testing.T) {
		f.noCleartext(t, wire0, "the device's forwards")
	})
	step(t, "removing the rules stops forwarding", func(t *testing.T) {
		st, errs, err := inst.Apply(nil)
		if err != nil || len(errs) != 0 || st.Removed != 6 {
			t.Fatalf("remove: %+v %v %v", st, errs, err)
		}
		if n := testutil.EthStats(t, f.gw, "p0")["tc_rule_count"]; n != 0 {
			t.Fatalf("the model still holds %d rules", n)
		}
		sendUDP(t, f.a, netip.MustParseAddr("48.0.0.1"), 9999, 64, 2)
		if n := recv4(); n != 0 {
			t.Fatalf("b received %d packets with no rule and forwarding off", n)
		}
	})
}
