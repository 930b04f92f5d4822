// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"fmt"
	"strings"
	"testing"
	"time"
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
//	    with XFRM_MSG_GETPOLICY, as charon reads it) stays within the bound.
func TestPostSAOffloaded(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	gen, dut, peer := l.netns(t), l.netns(t), l.netns(t)
	veth(t, gen, "g0", "10.0.0.1/24", dut, "lan0", "10.0.0.254/24")
	devA, devB := l.nicPair(t, dut, peer)
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
	run(t, ip, append(append([]string{"-n", dut, "xfrm", "policy", "add"}, sel...),
		"tmpl", "src", "123.0.0.1", "dst", "123.0.0.254", "proto", "esp", "mode", "tunnel", "reqid", "1",
		"offload", "packet", "dev", devA)...)

	g := startGateway(t, l, dut, fmt.Sprintf("interfaces:\n  - {name: lan0, l2: fib}\n  - {name: %s, l2: nic}\n", devA))
	g.explainUntil(t, func(out string) bool { return strings.Contains(out, "forward-out") },
		"--iface", "lan0", "src", "10.0.0.1", "dst", "48.0.1.1", "proto", "udp", "sport", "1", "dport", "2")

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

	step(t, "use times under fast-path-only traffic", func(t *testing.T) {
		before := ethStats(t, dut, devA)
		try("ip", "netns", "exec", gen, "ping", "-c", "30", "-i", "0.2", "-W", "1", "48.0.1.1")
		end := time.Now()
		d := statDelta(before, ethStats(t, dut, devA), "tx_ipsec_packets", "xdp_xmit", "tx_cleartext_packets")
		used := policyUseTime(t, dut, sel...)
		t.Logf("device: %v; the OUT policy's use time is %v before the last ping", d, end.Sub(used).Round(time.Second))
		if d["tx_ipsec_packets"] < 30 || d["tx_cleartext_packets"] != 0 || d["xdp_xmit"] < 20 {
			t.Errorf("device counters %v: want all 30 encrypted, most of them handed over by XDP (xdp_xmit)", d)
		}
		if used.IsZero() || end.Sub(used) > useTimeBound {
			t.Errorf("the OUT policy's use time is %v, %v before the traffic ended", used, end.Sub(used))
		}
	})
}
