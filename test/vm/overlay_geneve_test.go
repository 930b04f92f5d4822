// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

// The overlay's other shapes on the VM's kernel: a Geneve VTEP over an
// IPv6 underlay, carried in ESP tunnel mode, on a single uplink without a
// bond. The bond test (overlay_test.go) covers VXLAN over ESP transport.

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ovGeneveHost is one side's host.yaml: underlay fd00:70::N/64 on p0, VTEP
// fd00:80::N on lo, overlay 192.168.91.N/24, ESP tunnel mode between VTEPs.
func ovGeneveHost(name, peer string, me, other int, spiOut, spiIn string) string {
	return fmt.Sprintf(`name: %s
uplinks:
  ports: [p0]
  mtu: 1600
  addresses: [fd00:70::%d/64]
vteps:
  - name: gnv0
    type: geneve
    vni: 77
    local: fd00:80::%d
    remotes: [{address: fd00:80::%d, via: fd00:70::%d}]
    addresses: [192.168.91.%d/24]
ipsec:
  keys: %s.keys
  peers:
    - name: %s
      local: fd00:80::%d
      remote: fd00:80::%d
      mode: tunnel
      key-bits: 256
      spi-out: %s
      spi-in: %s
`, name, me, me, other, other, me, name, peer, me, other, spiOut, spiIn)
}

func TestOverlayGeneveIPv6TunnelMode(t *testing.T) {
	l := newLab(t)
	dir := t.TempDir()
	var a, b ovHost
	const (
		keyAB = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff01020304"
		keyBA = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100a0b0c0d0"
	)
	step(t, "two hosts on an IPv6 underlay", func(t *testing.T) {
		a = ovHost{ns: l.netns(t), file: filepath.Join(dir, "gnv-a.yaml"), name: "gnv-a"}
		b = ovHost{ns: l.netns(t), file: filepath.Join(dir, "gnv-b.yaml"), name: "gnv-b"}
		for _, ns := range []string{a.ns, b.ns} {
			// No duplicate address detection: addresses usable at once.
			nsRun(t, ns, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
		}
		veth(t, a.ns, "p0", "", b.ns, "p0", "")
		ovWrite(t, a.file, ovGeneveHost("gnv-a", "gnv-b", 2, 3, "0x2001", "0x2002"), 0o644)
		ovWrite(t, b.file, ovGeneveHost("gnv-b", "gnv-a", 3, 2, "0x2002", "0x2001"), 0o644)
		ovWrite(t, filepath.Join(dir, "gnv-a.keys"), "gnv-b out "+keyAB+"\ngnv-b in "+keyBA+"\n", 0o600)
		ovWrite(t, filepath.Join(dir, "gnv-b.keys"), "gnv-a out "+keyBA+"\ngnv-a in "+keyAB+"\n", 0o600)
	})
	before := nsState(t, a.ns)
	step(t, "plan: tunnel-mode SAs and policies, Geneve MTU from the IPv6 budget", func(t *testing.T) {
		out := ovMust(t, a.ns, "plan", "-f", a.file)
		t.Logf("plan:\n%s", out)
		mustContain(t, out,
			"ip xfrm state add src fd00:80::2 dst fd00:80::3 proto esp spi 0x2001 reqid 8193 mode tunnel",
			"aead 'rfc4106(gcm(aes))' <redacted> 128",
			"ip xfrm policy add src fd00:80::2/128 dst fd00:80::3/128 dir out tmpl src fd00:80::2 dst fd00:80::3 proto esp reqid 8193 mode tunnel",
			"dir fwd",
			"ip link add gnv0 type geneve id 77 remote fd00:80::3")
		if strings.Contains(out, keyAB[:16]) {
			t.Fatalf("the plan shows key material")
		}
	})
	step(t, "apply both hosts; ping across", func(t *testing.T) {
		t.Logf("A:\n%s", ovMust(t, a.ns, "apply", "-f", a.file))
		t.Logf("B:\n%s", ovMust(t, b.ns, "apply", "-f", b.file))
		var out string
		var err error
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			if out, err = try("ip", "netns", "exec", a.ns, "ping", "-c", "1", "-W", "2", "192.168.91.3"); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("no ping across the Geneve overlay: %v\n%s\nA:\n%s", err, out, nsState(t, a.ns))
		}
	})
	step(t, "the wire carries only ESP (over IPv6)", func(t *testing.T) {
		// What A sends: B's packets arrive as ESP too, but A re-injects
		// them decrypted on p0, so only A's own are counted.
		wire := captureWire(t, a.ns, "p0", "ip6 and src host fd00:80::2", 4, func() {
			nsRun(t, a.ns, "ping", "-c", "4", "-i", "0.2", "-W", "3", "192.168.91.3")
		})
		esp := 0
		for _, line := range strings.Split(strings.TrimSpace(wire), "\n") {
			switch {
			case strings.Contains(line, "ESP(spi=0x00002001"):
				esp++
			case strings.Contains(line, " > "):
				t.Errorf("cleartext on the wire: %s", line)
			}
		}
		if esp < 4 {
			t.Fatalf("%d ESP packets with SPI 0x2001, want >= 4:\n%s", esp, wire)
		}
	})
	step(t, "verify, apply again, teardown", func(t *testing.T) {
		mustContain(t, ovMust(t, a.ns, "verify", "-f", a.file), "verify: passed")
		mustContain(t, ovMust(t, a.ns, "apply", "-f", a.file), "nothing to do")
		ovMust(t, a.ns, "teardown", "-f", a.file)
		ovMust(t, b.ns, "teardown", "-f", b.file)
		if after := nsState(t, a.ns); after != before {
			t.Fatalf("A after teardown differs from before apply:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
}
