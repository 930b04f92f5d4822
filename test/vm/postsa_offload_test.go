// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"sluice/internal/testutil"
)

// TestPostSAOffloaded runs the case on a real packet-offloaded SA
// (the NIC model, kmod/nicmodel): the gateway daemon mirrors the kernel,
// XDP forwards cleartext to the model's port, and the model encrypts.
//
//		gen -- lan0 [dut: sluice gateway; SA offloaded on nmA] nmA == nmB [peer]
//
//	  - A DF packet above the SA's MTU is the kernel's: the sender gets
//	    frag-needed with 1446, and nothing leaves the port oversized. Before
//	    the post-SA check XDP redirected it, the model encrypted it to 1,554
//	    bytes and dropped it on the wire (tx_drop_oversize): the PMTU black
//	    hole of the issue.
//	  - Under traffic only XDP forwards, the OUT policy's use time (read
//	    with XFRM_MSG_GETPOLICY, as charon reads it) stays within the bound
//	    (3 s plus the flow's largest packet gap, as measured while sending).
//
// Under both mlx5 profiles of the model (issue 31). Under mlx5-6.12 the
// device matches selector addresses exactly: the test's subnet policy is
// announced as leaking (explain: device-miss, XDP hands it to the kernel,
// whose path leaks too), and the assertions run on the configuration
// sluice recommends for that driver, a per-host policy.
func TestPostSAOffloaded(t *testing.T) {
	for _, prof := range nmProfiles {
		t.Run(prof, func(t *testing.T) { postSAOffloaded(t, prof) })
	}
}

func postSAOffloaded(t *testing.T, prof string) {
	l := newLab(t)
	testutil.UseNicmodelProfile(t, prof)
	ip := ipPacket(t)
	gen, dut, peer := l.netns(t), l.netns(t), l.netns(t)
	veth(t, gen, "g0", "10.0.0.1/24", dut, "lan0", "10.0.0.254/24")
	devA, devB := l.nicPair(t, dut, peer)
	// No IPv6 on the wire: a neighbour or listener report crossing it
	// between the oracle's start and the counters' first read made the
	// two disagree by one frame (WireAgrees).
	nsRun(t, dut, "sysctl", "-qw", "net.ipv6.conf."+devA+".disable_ipv6=1")
	nsRun(t, peer, "sysctl", "-qw", "net.ipv6.conf."+devB+".disable_ipv6=1")
	run(t, "ip", "-n", dut, "addr", "add", "123.0.0.1/16", "dev", devA)
	run(t, "ip", "-n", peer, "addr", "add", "123.0.0.254/16", "dev", devB)
	run(t, "ip", "-n", gen, "route", "add", "default", "via", "10.0.0.254")
	run(t, "ip", "-n", dut, "route", "add", "48.0.0.0/8", "via", "123.0.0.254")
	run(t, "ip", "-n", dut, "neigh", "replace", "123.0.0.254", "lladdr", macOf(t, peer, devB), "dev", devA, "nud", "permanent")
	nsRun(t, dut, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.icmp_ratelimit=0")
	const key = "0x0123456789abcdef0123456789abcdef01234567"
	run(t, ip, "-n", dut, "xfrm", "state", "add", "src", "123.0.0.1", "dst", "123.0.0.254", "proto", "esp", "spi", "0x1001",
		"reqid", "1", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", key, "128", "offload", "packet", "dev", devA, "dir", "out")
	sel := []string{"src", "10.0.0.0/24", "dst", "48.0.1.0/24", "dir", "out"}
	outPolicy := func(verb string) {
		run(t, ip, append(append([]string{"-n", dut, "xfrm", "policy", verb}, sel...),
			"tmpl", "src", "123.0.0.1", "dst", "123.0.0.254", "proto", "esp", "mode", "tunnel", "reqid", "1",
			"offload", "packet", "dev", devA)...)
	}
	outPolicy("add")

	g := startGateway(t, l, dut, fmt.Sprintf("interfaces:\n  - {name: lan0, l2: fib}\n  - {name: %s, l2: nic}\n", devA))
	flow := []string{"--iface", "lan0", "src", "10.0.0.1", "dst", "48.0.1.1", "proto", "udp", "sport", "1", "dport", "2"}
	if prof == testutil.ProfileMlx5_612 {
		// The subnet policy leaks on this device whoever hands it the
		// packets: XDP passes them to the kernel and says why. Then the
		// policy sluice recommends for the driver: one per host pair.
		g.explainUntil(t, func(out string) bool { return strings.Contains(out, "device-miss") }, flow...)
		run(t, ip, "-n", dut, "xfrm", "policy", "delete", "src", "10.0.0.0/24", "dst", "48.0.1.0/24", "dir", "out")
		sel = []string{"src", "10.0.0.1/32", "dst", "48.0.1.1/32", "dir", "out"}
		outPolicy("add")
	}
	g.explainUntil(t, func(out string) bool { return strings.Contains(out, "forward-out") }, flow...)

	step(t, "above the SA's MTU: the kernel answers, nothing oversized leaves", func(t *testing.T) {
		before := ethStats(t, dut, devA)
		out, _ := try("ip", "netns", "exec", gen, "ping", "-c", "2", "-W", "1", "-M", "do", "-s", "1472", "48.0.1.1")
		d := statDelta(before, ethStats(t, dut, devA), "tx_drop_oversize", "tx_ipsec_packets")
		if !strings.Contains(out, "mtu = 1446") {
			t.Errorf("the sender got no frag-needed with mtu 1446:\n%s", out)
		}
		if d["tx_drop_oversize"] != 0 {
			t.Errorf("%d oversized frames dropped on the wire (a PMTU black hole)", d["tx_drop_oversize"])
		}
		try("ip", "-n", gen, "route", "flush", "cache")
		before = ethStats(t, dut, devA)
		try("ip", "netns", "exec", gen, "ping", "-c", "2", "-W", "1", "-M", "do", "-s", "1418", "48.0.1.1") // 1446 bytes
		d = statDelta(before, ethStats(t, dut, devA), "tx_drop_oversize", "tx_ipsec_packets")
		if d["tx_ipsec_packets"] < 2 || d["tx_drop_oversize"] != 0 {
			t.Errorf("1446-byte packets: %v, want both encrypted and none oversized", d)
		}
	})

	// The wire oracle: a capture on the peer port's tap.
	oracle, p0 := testutil.NicWireOracle(t, peer, devB), ethStats(t, peer, devB)
	defer testutil.WireAgrees(t, oracle, 0, peer, devB, p0)
	step(t, "use times under fast-path-only traffic", func(t *testing.T) {
		before, m := ethStats(t, dut, devA), oracle.Drain(t)
		sent := sendPaced(t, gen, "48.0.1.1:9", 30, 200*time.Millisecond)
		d := statDelta(before, ethStats(t, dut, devA), "tx_ipsec_packets", "xdp_xmit", "tx_cleartext_packets")
		used := policyUseTime(t, dut, sel...)
		// The bound from the packets as they went, not from the pacing
		// asked for: a loaded guest stretches both the gaps and the run.
		// The last packet reached the dut no earlier than just before it
		// was written, so an age above the bound from there is a real
		// one. The kernel takes one packet per route epoch (1 s): one per
		// started second of the run plus the epoch it began in, and never
		// fewer allowed than the 10 of a quiet 6 s run.
		age, gap, span := sent.last().Sub(used), sent.maxGap(), sent.span()
		bound := 3*time.Second + gap // docs/fastpath.md, "Policy use times"
		kernel := max(10, uint64((span+time.Second-1)/time.Second)+2)
		t.Logf("device: %v; sent 30 over %v (largest gap %v); the OUT policy's use time is %v old at the last packet (bound %v)",
			d, span.Round(time.Millisecond), gap.Round(time.Millisecond), age.Round(time.Millisecond), bound.Round(time.Millisecond))
		if d["tx_ipsec_packets"] < 30 || d["tx_cleartext_packets"] != 0 || d["xdp_xmit"]+kernel < 30 {
			t.Errorf("device counters %v: want all 30 encrypted, all but at most %d handed over by XDP (xdp_xmit)", d, kernel)
		}
		oracle.NoCleartext(t, m, testutil.FlowOf("10.0.0.0/24", "48.0.1.0/24"), "30 datagrams through XDP and the model")
		if used.IsZero() || age > bound {
			t.Errorf("the OUT policy's use time is %v, %v before the last packet: want within %v", used, age, bound)
		}
	})
}
