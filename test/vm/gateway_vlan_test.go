// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"strconv"
	"strings"
	"testing"
)

func snmpForwarded(t *testing.T, ns string) int {
	t.Helper()
	lines := strings.Split(nsRun(t, ns, "cat", "/proc/net/snmp"), "\n")
	for i := 0; i+1 < len(lines); i++ {
		if strings.HasPrefix(lines[i], "Ip: ") && strings.HasPrefix(lines[i+1], "Ip: ") {
			h, v := strings.Fields(lines[i]), strings.Fields(lines[i+1])
			for j := range h {
				if h[j] == "ForwDatagrams" {
					n, _ := strconv.Atoi(v[j])
					return n
				}
			}
		}
	}
	t.Fatal("no Ip ForwDatagrams in /proc/net/snmp")
	return 0
}

// TestGatewayVLANChild runs seed 002's routed layout on a real 802.1Q
// device: cleartext arrives tagged 502 on lan0 (the gateway's lan0.502),
// matches a (lab) packet-offload policy on wan0, and is forwarded by XDP
// with the tag popped, around the kernel's stack.
//
// The policy is a static (made-up) one on a veth, on purpose: this test is
// about the 802.1Q ingress (tag popped, the child's policies, the kernel's
// VLAN rules), which the NIC model does not change; the path into a real
// packet-offloaded SA, with ESP on the wire, is TestGatewayPacketOffloadOnModel's.
func TestGatewayVLANChild(t *testing.T) {
	l := newLab(t)
	gen, dut, sink := l.netns(t), l.netns(t), l.netns(t)
	veth(t, gen, "g0", "", dut, "lan0", "")
	veth(t, dut, "wan0", "123.0.0.1/16", sink, "s0", "123.0.0.254/16")
	run(t, "ip", "-n", gen, "link", "add", "link", "g0", "name", "g0.502", "type", "vlan", "id", "502")
	run(t, "ip", "-n", gen, "addr", "add", "10.0.0.1/24", "dev", "g0.502")
	run(t, "ip", "-n", gen, "link", "set", "g0.502", "up")
	run(t, "ip", "-n", gen, "route", "add", "default", "via", "10.0.0.254")
	run(t, "ip", "-n", dut, "link", "add", "link", "lan0", "name", "lan0.502", "type", "vlan", "id", "502")
	run(t, "ip", "-n", dut, "addr", "add", "10.0.0.254/24", "dev", "lan0.502")
	run(t, "ip", "-n", dut, "link", "set", "lan0.502", "up")
	run(t, "ip", "-n", dut, "route", "add", "48.0.0.0/8", "via", "123.0.0.254")
	nsRun(t, dut, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	nsRun(t, sink, "ethtool", "-K", "s0", "gro", "on")
	nsRun(t, gen, "ping", "-c", "1", "-W", "3", "10.0.0.254")
	nsRun(t, dut, "ping", "-c", "1", "-W", "3", "123.0.0.254")

	g := startGateway(t, l, dut, `lab: true
policy-source: static
interfaces:
  - {name: lan0, l2: fib}
  - {name: lan0.502, l2: fib}
  - {name: wan0, l2: fib}
policies:
  - {dir: out, src: 10.0.0.0/24, dst: 48.0.1.0/24, priority: 100, peer: 123.0.0.254, local: 123.0.0.1, reqid: 1, offload: packet, offload-dev: wan0}
`)
	step(t, "explain maps the tag to lan0.502 and pops it", func(t *testing.T) {
		g.explainUntil(t, func(out string) bool {
			return strings.Contains(out, "forward-out") && strings.Contains(out, "egress:  wan0") && !strings.Contains(out, " vlan ")
		}, "--iface", "lan0", "vlan", "502", "src", "10.0.0.1", "dst", "48.0.1.9")
	})
	step(t, "tagged cleartext is forwarded by XDP, untagged, around the stack", func(t *testing.T) {
		fwd0 := snmpForwarded(t, dut)
		out := captureWire(t, sink, "s0", "icmp", 5, func() {
			try("ip", "netns", "exec", gen, "ping", "-c", "5", "-i", "0.2", "-W", "1", "48.0.1.9")
		})
		if strings.Count(out, "ICMP echo request") < 5 || strings.Contains(out, "802.1Q") {
			t.Fatalf("want 5 untagged echo requests on the WAN:\n%s", out)
		}
		if fwd := snmpForwarded(t, dut) - fwd0; fwd > 1 {
			t.Fatalf("the kernel forwarded %d datagrams: XDP did not take the tagged traffic", fwd)
		}
	})
}
