// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil"
)

// TestFlowerDaemon runs `sluice gateway run` with the flower tier on (lab:
// software rules) and checks the wiring end to end: the kernel's real SA
// and OUT policy, packet-offloaded on the NIC model's port wan0, mirrored by
// the daemon, become rules on the VLAN child's parent, and the model
// encrypts what they forward; a port deleted and re-created
// under its name gets the XDP program and its rules again; a killed daemon
// leaves them (hardware rules outlive a process) and `sluice gateway stop`
// removes them.
func TestFlowerDaemon(t *testing.T) {
	l := newLab(t)
	ip := testutil.IPPacket(t)
	gen, dut, sink := l.netns(t), l.netns(t), l.netns(t)
	veth(t, gen, "g0", "", dut, "lan0", "")
	testutil.NicPair(t, dut, "wan0", sink, "s0")
	run(t, "ip", "-n", dut, "addr", "add", "123.0.0.1/16", "dev", "wan0")
	run(t, "ip", "-n", sink, "addr", "add", "123.0.0.254/16", "dev", "s0")
	run(t, "ip", "-n", dut, "link", "add", "link", "lan0", "name", "lan0.502", "type", "vlan", "id", "502")
	run(t, "ip", "-n", dut, "addr", "add", "10.0.0.254/24", "dev", "lan0.502")
	run(t, "ip", "-n", dut, "link", "set", "lan0.502", "up")
	run(t, "ip", "-n", dut, "route", "add", "48.0.0.0/8", "via", "123.0.0.254")
	nsRun(t, dut, "sysctl", "-qw", "net.ipv4.ip_forward=1")    // a gateway forwards; rules follow the kernel
	nsRun(t, dut, "ping", "-c", "1", "-W", "3", "123.0.0.254") // resolves the next hop's MAC
	// The tunnel, as strongSwan installs it with packet offload.
	run(t, ip, "-n", dut, "xfrm", "state", "add", "src", "123.0.0.1", "dst", "123.0.0.254", "proto", "esp", "spi", "0x1001",
		"reqid", "1", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", labKey, "128", "offload", "packet", "dev", "wan0", "dir", "out")
	run(t, ip, "-n", dut, "xfrm", "policy", "add", "src", "10.0.0.0/24", "dst", "48.0.1.0/24", "dir", "out", "priority", "100",
		"tmpl", "src", "123.0.0.1", "dst", "123.0.0.254", "proto", "esp", "reqid", "1", "mode", "tunnel", "offload", "packet", "dev", "wan0")

	g := startGateway(t, l, dut, `lab: true
flower-test-skip-hw: true
interfaces:
  - {name: lan0, l2: fib}
  - {name: lan0.502, l2: fib, flower: outbound}
  - {name: wan0, l2: fib}
`)
	rules := func() string { return run(t, "tc", "-n", dut, "filter", "show", "dev", "lan0", "ingress") }
	step(t, "the daemon installs the rule on lan0 for VLAN 502", func(t *testing.T) {
		deadline := time.Now().Add(60 * time.Second)
		// The forward and its three guards (ICMP, TTL, the gateway's own
		// 10.0.0.254 inside the source prefix); guards go in first.
		for strings.Count(rules(), " handle 0x") < 4 || !strings.Contains(rules(), "Egress Redirect to device wan0") {
			if time.Now().After(deadline) {
				t.Fatalf("no rule after 60 s:\n%s", rules())
			}
			time.Sleep(200 * time.Millisecond)
		}
		mustContain(t, rules(), "vlan_id 502", "skip_hw", "dst_ip 48.0.1.0/24", "src_ip 10.0.0.254", "pop", "pedit", "csum")
	})
	step(t, "a port deleted and re-created gets its program and rules again", func(t *testing.T) {
		// A driver reload or a VF re-created: same name, new ifindex,
		// no XDP program and no filters.
		run(t, "ip", "-n", dut, "link", "del", "lan0") // its VLAN child and g0 go with it
		veth(t, gen, "g0", "", dut, "lan0", "")
		run(t, "ip", "-n", dut, "link", "add", "link", "lan0", "name", "lan0.502", "type", "vlan", "id", "502")
		run(t, "ip", "-n", dut, "addr", "add", "10.0.0.254/24", "dev", "lan0.502")
		run(t, "ip", "-n", dut, "link", "set", "lan0.502", "up")
		deadline := time.Now().Add(60 * time.Second)
		for strings.Count(rules(), " handle 0x") < 4 || !strings.Contains(rules(), "Egress Redirect to device wan0") ||
			!strings.Contains(run(t, "ip", "-n", dut, "-d", "link", "show", "lan0"), "prog/xdp") {
			if time.Now().After(deadline) {
				t.Fatalf("no program or rules on the re-created lan0 after 60 s:\n%s\n%s", rules(), run(t, "ip", "-n", dut, "-d", "link", "show", "lan0"))
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	step(t, "killed, the daemon leaves its rules; gateway stop removes them", func(t *testing.T) {
		g.daemon.Process.Signal(syscall.SIGKILL)
		g.daemon.Wait()
		if !strings.Contains(rules(), "Egress Redirect") {
			t.Fatal("a killed daemon cannot have removed its rules; the test is wrong")
		}
		out := run(t, "ip", "netns", "exec", dut, g.bin, "gateway", "stop", "--pin-dir", g.pinDir)
		mustContain(t, out, "removed 4 flower rule(s)")
		if r := rules(); strings.TrimSpace(r) != "" {
			t.Fatalf("filters left after stop:\n%s", r)
		}
	})
}
