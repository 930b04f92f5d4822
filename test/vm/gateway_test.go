// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"strings"
	"testing"
)

// TestGatewayLeavesSoftwareSAsToTheKernel is invariant (a) end to end on a
// kernel with ESP: with sluice's XDP program on the gateway's ports and the
// kernel's policies mirrored, traffic whose SA is not packet-offloaded
// (software here; crypto offload on the NIC model below) must be encrypted by the
// kernel: the far side of the WAN sees ESP only, never the cleartext.
//
//	gen 10.0.0.1 -- lan0 [dut: sluice XDP] wan0 123.0.0.1 ==ESP tunnel== s0 123.0.0.254 sink
func TestGatewayLeavesSoftwareSAsToTheKernel(t *testing.T) {
	l := newLab(t)
	gen, dut, sink := l.netns(t), l.netns(t), l.netns(t)
	veth(t, gen, "g0", "10.0.0.1/24", dut, "lan0", "10.0.0.254/24")
	veth(t, dut, "wan0", "123.0.0.1/16", sink, "s0", "123.0.0.254/16")
	run(t, "ip", "-n", gen, "route", "add", "default", "via", "10.0.0.254")
	run(t, "ip", "-n", dut, "route", "add", "48.0.0.0/8", "via", "123.0.0.254")
	nsRun(t, dut, "sysctl", "-qw", "net.ipv4.ip_forward=1")

	const key = "0x0123456789abcdef0123456789abcdef01234567"
	tunnel := func(dir, src, dst, tsrc, tdst string) {
		run(t, "ip", "-n", dut, "xfrm", "policy", "add", "src", src, "dst", dst, "dir", dir,
			"tmpl", "src", tsrc, "dst", tdst, "proto", "esp", "mode", "tunnel", "reqid", "1")
	}
	sa := func(src, dst, spi string) {
		run(t, "ip", "-n", dut, "xfrm", "state", "add", "src", src, "dst", dst, "proto", "esp", "spi", spi,
			"reqid", "1", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", key, "128")
	}
	sa("123.0.0.1", "123.0.0.254", "0x1001")
	sa("123.0.0.254", "123.0.0.1", "0x1002")
	tunnel("out", "10.0.0.0/8", "48.0.1.0/24", "123.0.0.1", "123.0.0.254")
	tunnel("in", "48.0.1.0/24", "10.0.0.0/8", "123.0.0.254", "123.0.0.1")
	tunnel("fwd", "48.0.1.0/24", "10.0.0.0/8", "123.0.0.254", "123.0.0.1")
	// The sink does NOT decrypt: a decrypting receiver re-injects the inner
	// packet on the same device, and captures there show it as cleartext.
	// GRO on s0 puts the veth in NAPI mode, so frames XDP might redirect
	// out of wan0 would really arrive (and be captured) instead of being
	// dropped silently.
	nsRun(t, sink, "ethtool", "-K", "s0", "gro", "on")

	g := startGateway(t, l, dut, "interfaces:\n  - {name: lan0, l2: fib}\n  - {name: wan0, l2: fib}\n")
	notOffloaded := func(out string) bool { return strings.Contains(out, "not-offloaded") }

	step(t, "the kernel's policies and SAs are mirrored", func(t *testing.T) {
		g.explainUntil(t, notOffloaded, "--iface", "lan0", "src", "10.0.0.1", "dst", "48.0.1.1", "proto", "icmp", "type", "8")
	})
	step(t, "matching traffic leaves as ESP only", func(t *testing.T) {
		out := captureWire(t, sink, "s0", "ip and not arp", 3, func() {
			// No replies: the sink cannot decrypt. Only what crosses the wire counts.
			try("ip", "netns", "exec", gen, "ping", "-c", "3", "-i", "0.3", "-W", "1", "48.0.1.1")
		})
		if !strings.Contains(out, "ESP(spi=0x00001001") {
			t.Fatalf("no ESP from the gateway on the WAN:\n%s", out)
		}
		if strings.Contains(out, "ICMP") {
			t.Fatalf("cleartext ICMP on the WAN: the fast path leaked past the kernel's encryption:\n%s", out)
		}
	})
	step(t, "crypto offload is not packet offload: still the kernel's", func(t *testing.T) {
		// On the NIC model, whose crypto offload really encrypts (it was
		// netdevsim's, which does not).
		nsdev, _ := l.nicPairNamed(t, dut, "nmcry0", l.netns(t), "nmcry1")
		run(t, "ip", "-n", dut, "xfrm", "state", "add", "src", "123.0.0.1", "dst", "123.0.9.9", "proto", "esp", "spi", "0x2001",
			"reqid", "9", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", key, "128", "offload", "dev", nsdev, "dir", "out")
		run(t, "ip", "-n", dut, "xfrm", "policy", "add", "src", "10.0.0.0/8", "dst", "48.0.9.0/24", "dir", "out",
			"tmpl", "src", "123.0.0.1", "dst", "123.0.9.9", "proto", "esp", "mode", "tunnel", "reqid", "9")
		g.explainUntil(t, notOffloaded, "--iface", "lan0", "src", "10.0.0.1", "dst", "48.0.9.1")
	})
	step(t, "show ipsec sa: offload, counters, and keys only when asked", func(t *testing.T) {
		out := nsRun(t, dut, g.bin, "show", "ipsec", "sa")
		mustContain(t, out, "0x00002001", "crypto dev ", "dir out", "rfc4106(gcm(aes))", "0x00001001", "none")
		if strings.Contains(out, strings.TrimPrefix(key, "0x")) {
			t.Fatalf("show ipsec sa printed key material without --keys:\n%s", out)
		}
		mustContain(t, nsRun(t, dut, g.bin, "show", "ipsec", "sa", "--spi", "0x1001", "--keys"), strings.TrimPrefix(key, "0x"))
	})
}
