// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"strings"
	"testing"
	"time"

	"sluice/internal/testutil"
)

// TestGatewayQuirksBeneathVLAN: the gateway's WAN interface is an 802.1Q
// VLAN on a NIC model port under the mlx5-6.12 profile. `ethtool -i` of
// the VLAN says "802.1Q VLAN Support", which has no row in the driver
// table; the policies and SAs sit on the port beneath (a VLAN has no
// xfrmdev_ops), whose driver matches selector addresses exactly and sends
// in cleartext what no SA serves. The gateway must read the port's
// driver through the VLAN (kernel.StackDevices): the subnet policy's
// packets go to the kernel (explain's device-miss, the daemon's
// announcement) and the strict SA check is on. Before, it read the VLAN's
// driver alone and forwarded them into a device that sends most of the
// subnet in cleartext.
//
//	gen 10.0.0.1 -- lan0 [dut: sluice XDP] nmD.100 on nmD ==model wire== nmP.100 on nmP [peer]
func TestGatewayQuirksBeneathVLAN(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	testutil.UseNicmodelProfile(t, testutil.ProfileMlx5_612)
	gen, dut, peer := l.netns(t), l.netns(t), l.netns(t)
	veth(t, gen, "g0", "10.0.0.1/24", dut, "lan0", "10.0.0.254/24")
	nmD, nmP := l.nicPair(t, dut, peer)
	for _, e := range [][3]string{{dut, nmD, "123.0.0.1/16"}, {peer, nmP, "123.0.0.254/16"}} {
		nsRun(t, e[0], "sysctl", "-qw", "net.ipv6.conf."+e[1]+".disable_ipv6=1")
		run(t, "ip", "-n", e[0], "link", "add", "link", e[1], "name", e[1]+".100", "type", "vlan", "id", "100")
		run(t, "ip", "-n", e[0], "addr", "add", e[2], "dev", e[1]+".100")
		run(t, "ip", "-n", e[0], "link", "set", e[1]+".100", "up")
	}
	run(t, "ip", "-n", gen, "route", "add", "default", "via", "10.0.0.254")
	run(t, "ip", "-n", dut, "route", "add", "48.0.0.0/8", "via", "123.0.0.254")
	run(t, "ip", "-n", dut, "neigh", "replace", "123.0.0.254", "lladdr", macOf(t, peer, nmP), "dev", nmD+".100", "nud", "permanent")
	nsRun(t, dut, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	run(t, ip, "-n", dut, "xfrm", "state", "add", "src", "123.0.0.1", "dst", "123.0.0.254", "proto", "esp", "spi", "0x1001",
		"reqid", "1", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", nmKeyAB, "128", "offload", "packet", "dev", nmD, "dir", "out")
	run(t, ip, "-n", dut, "xfrm", "policy", "add", "src", "10.0.0.0/8", "dst", "48.0.1.0/24", "dir", "out",
		"tmpl", "src", "123.0.0.1", "dst", "123.0.0.254", "proto", "esp", "mode", "tunnel", "reqid", "1", "offload", "packet", "dev", nmD)
	if out := nsRun(t, dut, "ethtool", "-i", nmD+".100"); strings.Contains(out, "nicmodel") {
		t.Fatalf("ethtool -i of the VLAN names the model's driver: the test proves nothing:\n%s", out)
	}

	// nmD itself is not a gateway interface: only what lies beneath
	// nmD.100 can tell the gateway what nmD does.
	g := startGateway(t, l, dut, "interfaces:\n  - {name: lan0, l2: fib}\n  - {name: "+nmD+".100, l2: fib}\n")
	step(t, "the VLAN's port decides: the subnet policy goes to the kernel", func(t *testing.T) {
		g.explainUntil(t, func(out string) bool { return strings.Contains(out, "device-miss") },
			"--iface", "lan0", "src", "10.0.0.1", "dst", "48.0.1.1", "proto", "icmp", "type", "8")
		const announced = "this policy leaks on its offload device"
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(g.Log(), announced); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the daemon did not announce the leaking policy (%q):\n%s", announced, g.Log())
			}
		}
	})
	step(t, "the strict SA check is on, for the VLAN's port", func(t *testing.T) {
		if !strings.Contains(g.Log(), "strict SA check on") || !strings.Contains(g.Log(), "iface="+nmD+".100") {
			t.Errorf("the daemon did not take the strict SA check for %s.100 (its port sends in cleartext what no SA serves):\n%s", nmD, g.Log())
		}
	})
	step(t, "XDP hands the pings to the kernel", func(t *testing.T) {
		d0 := ethStats(t, dut, nmD)
		try("ip", "netns", "exec", gen, "ping", "-c", "3", "-i", "0.2", "-W", "1", "48.0.1.1")
		if d := statDelta(d0, ethStats(t, dut, nmD), "xdp_xmit"); d["xdp_xmit"] != 0 {
			t.Errorf("XDP sent %d frames into %s for a subnet policy its driver matches exactly; want 0 (device-miss)", d["xdp_xmit"], nmD)
		}
	})
}
