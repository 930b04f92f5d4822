// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestNicmodelCryptoInterop: crypto offload (`offload crypto dev nmA`)
// against the kernel's own ESP. On A the stack builds the ESP packet and
// the model encrypts it in place (IV and ICV written by the "device");
// on receive the model decrypts in place and hands the ESP packet up
// marked CRYPTO_DONE, so esp4/esp6 skip decryption, and the kernel keeps
// the replay window and the counters. B is plain software ESP.
func TestNicmodelCryptoInterop(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	cases := []struct {
		name            string
		v6, tunnel, esn bool
	}{
		{"ipv4-tunnel", false, true, false},
		{"ipv4-transport", false, false, false},
		// Sequence numbers cross 2^32 both ways. The high half is in the
		// AAD: on TX the model takes it from the stack (xo->seq.hi), on
		// RX it infers it from the window the kernel reports through
		// advance_esn. (One case carries it, to keep the VM time down.)
		{"ipv6-tunnel-esn-wrap", true, true, true},
		{"ipv6-transport", true, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := l.newNMHosts(t, c.v6, c.tunnel)
			s := nmKeys().cryptoMode()
			if c.esn {
				s = s.esnWrap()
			}
			h.install(t, ip, s)
			if st := run(t, ip, "-n", h.nsA, "xfrm", "state"); strings.Count(st, "mode crypto") != 2 {
				t.Fatalf("A's SAs are not both crypto-offloaded:\n%s", st)
			}

			before := ethStats(t, h.nsA, h.devA)
			const n = 5
			if out, ok := h.ping(t, n); !ok {
				t.Fatalf("ping through model crypto offload <-> kernel ESP failed:\n%s\nA: %v\nB: %v\n%s", out,
					ethStats(t, h.nsA, h.devA), ethStats(t, h.nsB, h.devB), run(t, ip, "-n", h.nsA, "-s", "xfrm", "state"))
			}
			d := statDelta(before, ethStats(t, h.nsA, h.devA), "tx_ipsec_crypto_packets", "rx_ipsec_crypto_packets",
				"rx_ipsec_crypto_auth_fail", "tx_ipsec_packets", "rx_ipsec_packets")
			if d["tx_ipsec_crypto_packets"] < n || d["rx_ipsec_crypto_packets"] < n || d["rx_ipsec_crypto_auth_fail"] != 0 ||
				d["tx_ipsec_packets"] != 0 || d["rx_ipsec_packets"] != 0 {
				t.Errorf("model counters: %v, want >= %d encrypted and decrypted in crypto mode, none in packet mode", d, n)
			}
			if p, failed, out := saStats(t, h.nsB, h.linkA, h.linkB, "0x1001"); p < n || failed != 0 {
				t.Errorf("B's software SA A->B: %d packets, %d integrity failures, want >= %d, 0:\n%s", p, failed, n, out)
			}
			// The stack counts crypto-offloaded SAs itself (the model's
			// update_stats leaves them alone).
			for _, sa := range [][3]string{{h.linkA, h.linkB, "0x1001"}, {h.linkB, h.linkA, "0x2001"}} {
				if p, failed, out := saStats(t, h.nsA, sa[0], sa[1], sa[2]); p < n || failed != 0 {
					t.Errorf("A's crypto-offloaded SA %s: %d packets, %d failed in ip -s xfrm state, want >= %d, 0:\n%s", sa[2], p, failed, n, out)
				}
			}
		})
	}
	t.Run("wrong-key", func(t *testing.T) {
		h := l.newNMHosts(t, false, true)
		h.install(t, ip, nmKeys().wrongKeys().cryptoMode())
		const n = 3
		if out, ok := h.ping(t, n); ok {
			t.Fatalf("ping succeeded with different keys on the two ends:\n%s", out)
		}
		// The model encrypted under A's key: B's kernel cannot verify it.
		if _, failed, out := saStats(t, h.nsB, h.linkA, h.linkB, "0x1001"); failed < n {
			t.Errorf("B's kernel: %d integrity failures on the model's ESP under another key, want >= %d:\n%s", failed, n, out)
		}
		// B's ESP under B's key: the model's ICV check fails. Under
		// kernel-xfrm it hands the packet up marked failed and A's kernel
		// drops it; under the mlx5 profiles the device drops it and
		// update_stats adds it to the SA's counters (row 8,
		// crypto_rx_hw_drop). Either way the SA counts the failures.
		_, _ = try("ip", "netns", "exec", h.nsB, "ping", "-c", "3", "-i", "0.2", "-W", "1", "-I", h.innerB, h.innerA)
		if st := ethStats(t, h.nsA, h.devA); st["rx_ipsec_crypto_auth_fail"] < n || st["rx_ipsec_crypto_packets"] != 0 {
			t.Errorf("model: rx_ipsec_crypto_auth_fail %d, rx_ipsec_crypto_packets %d; want >= %d and 0",
				st["rx_ipsec_crypto_auth_fail"], st["rx_ipsec_crypto_packets"], n)
		}
		if p, failed, out := saStats(t, h.nsA, h.linkB, h.linkA, "0x2001"); failed < n || p != 0 {
			t.Errorf("A's kernel on the model's failed ICVs: %d integrity failures, %d packets; want >= %d and 0:\n%s", failed, p, n, out)
		}
	})
}

// TestOverlayCryptoOffloadOnModel: the overlay's `offload: crypto` on a
// device that really does crypto offload. Host a's SAs are applied with
// offload crypto on its model port; host b is software ESP, set up by
// hand (what `sluice plan` prints for it; one sluice run less in TCG).
// verify sees a's SAs offloaded as asked and, with traffic, the device's
// IPsec counters rise (on netdevsim, which does not encrypt, nothing
// proved the device did the work).
func TestOverlayCryptoOffloadOnModel(t *testing.T) {
	l := newLab(t)
	dir := t.TempDir()
	a, b := l.netns(t), l.netns(t)
	devA, devB := l.nicPairNamed(t, a, "nmcA", b, "nmcB")
	ovWrite(t, filepath.Join(dir, "a.keys"), "peer out "+ovKeyAB+"\npeer in "+ovKeyBA+"\n", 0o600)
	af := filepath.Join(dir, "a.yaml")
	ovWrite(t, af, `name: a
uplinks:
  ports: [`+devA+`]
  addresses: [10.89.0.1/24]
ipsec:
  keys: a.keys
  peers:
    - name: peer
      local: 10.89.0.1
      remote: 10.89.0.2
      spi-out: 0x1001
      spi-in: 0x2001
      offload: crypto
      offload-dev: `+devA+`
`, 0o644)
	run(t, "ip", "-n", b, "addr", "add", "10.89.0.2/24", "dev", devB)
	for _, c := range [][]string{
		{"state", "add", "src", "10.89.0.2", "dst", "10.89.0.1", "proto", "esp", "spi", "0x2001", "reqid", "8193", "mode", "transport",
			"replay-window", "32", "aead", "rfc4106(gcm(aes))", "0x" + ovKeyBA, "128"},
		{"state", "add", "src", "10.89.0.1", "dst", "10.89.0.2", "proto", "esp", "spi", "0x1001", "reqid", "4097", "mode", "transport",
			"replay-window", "32", "aead", "rfc4106(gcm(aes))", "0x" + ovKeyAB, "128"},
		{"policy", "add", "src", "10.89.0.2/32", "dst", "10.89.0.1/32", "dir", "out", "tmpl", "proto", "esp", "reqid", "8193", "mode", "transport"},
		{"policy", "add", "src", "10.89.0.1/32", "dst", "10.89.0.2/32", "dir", "in", "tmpl", "proto", "esp", "reqid", "4097", "mode", "transport"},
	} {
		run(t, "ip", append([]string{"-n", b, "xfrm"}, c...)...)
	}
	ovMust(t, a, "apply", "-f", af)
	t.Cleanup(func() { _, _ = ovSluice(t, a, "teardown", "-f", af) })
	out := ovMust(t, a, "verify", "-f", af, "--traffic", "--window", "1s", "--send-to", "10.89.0.2")
	t.Logf("%s", out)
	mustContain(t, out, "spi 0x1001: offload crypto on "+devA+" as asked", "spi 0x2001: offload crypto on "+devA+" as asked",
		"tx_ipsec_crypto_packets +", "rx_ipsec_crypto_packets +", "verify: passed")
	if p, failed, o := saStats(t, b, "10.89.0.1", "10.89.0.2", "0x1001"); p == 0 || failed != 0 {
		t.Errorf("b's kernel decrypted %d of the model's packets, %d integrity failures:\n%s", p, failed, o)
	}
}
