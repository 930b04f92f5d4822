// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

// Smoke tests of the test VM itself: the kernel features sluice's VM tests
// rely on are really there, driven through the real iproute2/ethtool
// binaries. If one of these fails, every feature test built on it would
// fail for a reason unrelated to sluice.

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"sluice/internal/testutil"
)

const (
	espAddrA = "10.77.0.1"
	espAddrB = "10.77.0.2"
	spiAB    = "0x1001" // A -> B
	spiBA    = "0x1002" // B -> A
	aead     = "rfc4106(gcm(aes))"
	// rfc4106 keys are the AES key followed by a 4-byte salt: 16 + 4 bytes
	// for AES-128, written as 40 hex digits. The ICV is 128 bits.
	keyAB = "0x00112233445566778899aabbccddeeff01020304"
	keyBA = "0xffeeddccbbaa99887766554433221100a0b0c0d0"
	// keyABWrong differs from keyAB in the first AES key byte.
	keyABWrong = "0x10112233445566778899aabbccddeeff01020304"
	icvBits    = "128"
)

// setupESP joins two namespaces with a veth and protects all traffic
// between them with ESP in transport mode, both directions. keyAtB is the
// key B decrypts A's packets with: keyAB for a working tunnel.
func setupESP(t *testing.T, l *lab, keyAtB string) (a, b string) {
	t.Helper()
	step(t, "namespaces and veth", func(t *testing.T) {
		a, b = l.netns(t), l.netns(t)
		veth(t, a, "esp0", espAddrA+"/24", b, "esp0", espAddrB+"/24")
	})
	step(t, "xfrm states rfc4106 128-bit", func(t *testing.T) {
		for _, side := range []struct{ ns, keyAB string }{{a, keyAB}, {b, keyAtB}} {
			run(t, "ip", "-n", side.ns, "xfrm", "state", "add", "src", espAddrA, "dst", espAddrB,
				"proto", "esp", "spi", spiAB, "reqid", "1", "mode", "transport", "aead", aead, side.keyAB, icvBits)
			run(t, "ip", "-n", side.ns, "xfrm", "state", "add", "src", espAddrB, "dst", espAddrA,
				"proto", "esp", "spi", spiBA, "reqid", "2", "mode", "transport", "aead", aead, keyBA, icvBits)
		}
	})
	step(t, "xfrm policies", func(t *testing.T) {
		policy := func(ns, src, dst, dir, reqid string) {
			run(t, "ip", "-n", ns, "xfrm", "policy", "add", "src", src+"/32", "dst", dst+"/32", "dir", dir,
				"tmpl", "src", src, "dst", dst, "proto", "esp", "reqid", reqid, "mode", "transport")
		}
		policy(a, espAddrA, espAddrB, "out", "1")
		policy(a, espAddrB, espAddrA, "in", "2")
		policy(b, espAddrB, espAddrA, "out", "2")
		policy(b, espAddrA, espAddrB, "in", "1")
	})
	return a, b
}

func TestESPTransportGCM(t *testing.T) {
	l := newLab(t)
	a, b := setupESP(t, l, keyAB)
	step(t, "ping through ESP", func(t *testing.T) {
		nsRun(t, a, "ping", "-c", "3", "-i", "0.2", "-W", "2", espAddrB)
	})
	step(t, "SA counters show encryption and decryption", func(t *testing.T) {
		for _, sa := range []struct{ ns, what, src, dst, spi string }{
			{a, "A encrypted (out)", espAddrA, espAddrB, spiAB},
			{b, "B decrypted (in)", espAddrA, espAddrB, spiAB},
			{b, "B encrypted replies (out)", espAddrB, espAddrA, spiBA},
			{a, "A decrypted replies (in)", espAddrB, espAddrA, spiBA},
		} {
			packets, failed, out := saStats(t, sa.ns, sa.src, sa.dst, sa.spi)
			if packets < 3 || failed != 0 {
				t.Errorf("%s: SA %s counted %d packets, %d integrity failures; want >= 3 and 0\n%s", sa.what, sa.spi, packets, failed, out)
			}
		}
	})
}

// TestESPWrongKeyFails is the proof that the ESP test can fail: with a
// different key on the receiving side, nothing gets through.
func TestESPWrongKeyFails(t *testing.T) {
	l := newLab(t)
	a, b := setupESP(t, l, keyABWrong)
	step(t, "ping fails", func(t *testing.T) {
		out, err := try("ip", "netns", "exec", a, "ping", "-c", "2", "-i", "0.2", "-W", "1", espAddrB)
		if err == nil {
			t.Fatalf("ping succeeded although B decrypts with a wrong key: the ESP check cannot tell a broken tunnel from a working one\n%s", out)
		}
	})
	step(t, "B counted integrity failures", func(t *testing.T) {
		sent, _, outA := saStats(t, a, espAddrA, espAddrB, spiAB)
		_, failed, outB := saStats(t, b, espAddrA, espAddrB, spiAB)
		if sent < 2 || failed < 1 {
			t.Fatalf("want A to have encrypted >= 2 packets (got %d) and B to count ICV failures (got %d)\nA:\n%s\nB:\n%s", sent, failed, outA, outB)
		}
	})
}

func TestVirtualDevices(t *testing.T) {
	l := newLab(t)
	var ns string
	step(t, "namespace and lower device", func(t *testing.T) {
		ns = l.netns(t)
		veth(t, ns, "low0", "10.78.0.1/24", ns, "low1", "10.78.0.2/24")
	})
	for _, tc := range []struct {
		name, dev string
		add       []string
		want      string // in `ip -d link show`
	}{
		{"vlan", "low0.10", []string{"link", "low0", "name", "low0.10", "type", "vlan", "id", "10"}, "vlan protocol 802.1Q id 10"},
		{"vxlan", "vx0", []string{"name", "vx0", "type", "vxlan", "id", "42", "dstport", "4789", "local", "10.78.0.1", "remote", "10.78.0.2", "dev", "low0"}, "vxlan id 42"},
		{"geneve", "gn0", []string{"name", "gn0", "type", "geneve", "id", "43", "remote", "10.78.0.2"}, "geneve id 43"},
		{"bond active-backup", "bond0", []string{"name", "bond0", "type", "bond", "mode", "active-backup", "miimon", "100"}, "bond mode active-backup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run(t, "ip", append([]string{"-n", ns, "link", "add"}, tc.add...)...)
			run(t, "ip", "-n", ns, "link", "set", tc.dev, "up")
			mustContain(t, run(t, "ip", "-n", ns, "-d", "link", "show", "dev", tc.dev), tc.want)
		})
	}
	t.Run("bond enslaves a port", func(t *testing.T) {
		run(t, "ip", "-n", ns, "link", "add", "bp0", "type", "veth", "peer", "name", "bp1")
		run(t, "ip", "-n", ns, "link", "set", "bp0", "master", "bond0")
		mustContain(t, run(t, "ip", "-n", ns, "-d", "link", "show", "dev", "bp0"), "master bond0", "bond_slave")
	})
}

var sentPktRe = regexp.MustCompile(`Sent \d+ bytes (\d+) pkt`)

func TestFlowerPeditMirred(t *testing.T) {
	l := newLab(t)
	var a, b string
	step(t, "topology", func(t *testing.T) {
		a, b = l.netns(t), l.netns(t)
		veth(t, a, "fl0", "10.79.0.1/24", b, "fl0", "10.79.0.2/24")
		// The mirror target: what mirred sends out of mir0 arrives at mir1.
		veth(t, b, "mir0", "", b, "mir1", "")
	})
	step(t, "clsact qdisc", func(t *testing.T) {
		run(t, "tc", "-n", b, "qdisc", "add", "dev", "fl0", "clsact")
		run(t, "tc", "-n", b, "qdisc", "add", "dev", "mir1", "clsact")
	})
	step(t, "flower skip_hw with pedit ttl-1, csum, mirred", func(t *testing.T) {
		// ttl add 0xff is ttl - 1 (the byte wraps); csum fixes the header
		// checksum so the packet is still delivered.
		run(t, "tc", "-n", b, "filter", "add", "dev", "fl0", "ingress", "protocol", "ip", "pref", "10",
			"flower", "skip_hw", "ip_proto", "icmp",
			"action", "pedit", "ex", "munge", "ip", "ttl", "add", "0xff", "pipe",
			"action", "csum", "ip", "pipe",
			"action", "mirred", "egress", "mirror", "dev", "mir0")
		mustContain(t, run(t, "tc", "-n", b, "filter", "show", "dev", "fl0", "ingress"),
			"flower", "skip_hw", "not_in_hw", "pedit", "csum", "mirred (Egress Mirror to device mir0)")
		// Counts mirrored ICMP packets whose TTL really went from 64 to 63.
		run(t, "tc", "-n", b, "filter", "add", "dev", "mir1", "ingress", "protocol", "ip", "pref", "10",
			"flower", "skip_hw", "ip_proto", "icmp", "ip_ttl", "63", "action", "pass")
	})
	step(t, "traffic is edited and mirrored", func(t *testing.T) {
		nsRun(t, a, "ping", "-c", "3", "-i", "0.2", "-W", "2", "10.79.0.2")
		out := run(t, "tc", "-n", b, "-s", "filter", "show", "dev", "mir1", "ingress")
		m := sentPktRe.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no action statistics on mir1:\n%s", out)
		}
		if n, _ := strconv.Atoi(m[1]); n < 3 {
			t.Fatalf("mir1 saw %d mirrored ICMP packets with TTL 63, want >= 3\nmir1:\n%s\nfl0:\n%s",
				n, out, run(t, "tc", "-n", b, "-s", "filter", "show", "dev", "fl0", "ingress"))
		}
	})
}

func TestNetdevsimCryptoOffload(t *testing.T) {
	l := newLab(t)
	ko := os.Getenv("SLUICE_NETDEVSIM")
	if ko == "" {
		t.Skip("SLUICE_NETDEVSIM unset: netdevsim.ko not built (scripts/vmtest.sh builds it with `sluice vm netdevsim`)")
	}
	step(t, "load netdevsim", func(t *testing.T) {
		if _, err := os.Stat("/sys/module/netdevsim"); err == nil {
			return // loaded by an earlier run in this VM
		}
		// insmod does not resolve dependencies (psample): modprobe them.
		for _, dep := range strings.Split(strings.TrimSpace(run(t, "modinfo", "-F", "depends", ko)), ",") {
			if dep != "" {
				run(t, "modprobe", dep)
			}
		}
		run(t, "insmod", ko)
	})
	var ns, dev string
	var id int
	step(t, "new device", func(t *testing.T) {
		ns = l.netns(t)
		id = freeNetdevsimID()
		// Written from inside ns, the device's netdevs are created there.
		nsRun(t, ns, "sh", "-c", fmt.Sprintf("echo '%d 1' > /sys/bus/netdevsim/new_device", id))
		l.owner.Cleanup(func() {
			if err := os.WriteFile("/sys/bus/netdevsim/del_device", []byte(strconv.Itoa(id)), 0); err != nil {
				l.owner.Logf("cleanup: deleting netdevsim%d: %v", id, err)
			}
		})
		dev = netdevsimNetdev(t, ns, id)
	})
	step(t, "esp-hw-offload on", func(t *testing.T) {
		out := nsRun(t, ns, "ethtool", "-k", dev)
		if !regexp.MustCompile(`(?m)^esp-hw-offload: on`).MatchString(out) {
			t.Fatalf("ethtool -k %s does not show esp-hw-offload: on\n%s", dev, out)
		}
	})
	step(t, "SA with offload dev accepted", func(t *testing.T) {
		run(t, "ip", "-n", ns, "addr", "add", "10.80.0.1/24", "dev", dev)
		run(t, "ip", "-n", ns, "link", "set", dev, "up")
		run(t, "ip", "-n", ns, "xfrm", "state", "add", "src", "10.80.0.1", "dst", "10.80.0.2",
			"proto", "esp", "spi", "0x2001", "reqid", "1", "mode", "transport",
			"aead", aead, keyAB, icvBits, "offload", "dev", dev, "dir", "out")
	})
	step(t, "ip xfrm state shows the offload", func(t *testing.T) {
		mustContain(t, run(t, "ip", "-n", ns, "xfrm", "state"), "crypto offload parameters: dev "+dev+" dir out")
	})
	step(t, "netdevsim holds the SA", func(t *testing.T) {
		// debugfs is mounted in the VM's root namespace, where tests run.
		p := fmt.Sprintf("/sys/kernel/debug/netdevsim/netdevsim%d/ports/0/ipsec", id)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		mustContain(t, string(b), "SA count=1", "spi=0x00002001")
	})
}

func freeNetdevsimID() int { return testutil.FreeNetdevsimID() }

func netdevsimNetdev(t *testing.T, ns string, id int) string {
	t.Helper()
	return testutil.NetdevsimNetdev(t, ns, id)
}

func mustContain(t *testing.T, out string, want ...string) {
	t.Helper()
	testutil.MustContain(t, out, want...)
}
