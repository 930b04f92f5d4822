// SPDX-License-Identifier: Apache-2.0

package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hostIKE is the ConnectX-6 SR-IOV guide's host A keyed by IKE with certificates.
var hostIKE = lines(
	"name: node-a",
	"ipsec:",
	"  keying: ike",
	"  ike:",
	"    ca: ca.pem",
	"    cert: node-a.pem",
	"    private-key: node-a.key",
	"    rekey-time: 30m",
	"  peers:",
	"    - name: node-b",
	"      local: 192.168.80.2",
	"      remote: 192.168.80.3",
	"      offload: crypto",
	"      offload-dev: bond0",
)

func TestParseHostIKE(t *testing.T) {
	h, err := ParseHost([]byte(hostIKE), "/etc/sluice/host.yaml")
	if err != nil {
		t.Fatal(err)
	}
	k := h.IPsec.IKE
	if h.IPsec.Peers[0].Keying != KeyingIKE || k.Auth() != "pubkey" || k.VICI != DefaultVICI {
		t.Fatalf("keying %q auth %q vici %q", h.IPsec.Peers[0].Keying, k.Auth(), k.VICI)
	}
	if k.RekeyTime != 30*time.Minute || k.LifeTime != 33*time.Minute || k.RandTime != 3*time.Minute {
		t.Fatalf("lifetimes %s %s %s, want 30m, 33m (rekey + 10%%), 3m", k.RekeyTime, k.LifeTime, k.RandTime)
	}
	if got := h.IKEPath(k.Cert); got != "/etc/sluice/node-a.pem" {
		t.Fatalf("cert path %s", got)
	}
	if h.HasKeying(KeyingManual) {
		t.Fatal("no peer is manual")
	}
}

// A file mixing manual and IKE peers: the key file is needed for the
// manual one only, and the manual one keeps its defaults.
func TestParseHostMixedKeying(t *testing.T) {
	doc := lines(
		"ipsec:",
		"  keys: a.keys",
		"  ike: {psk: a.psk}",
		"  peers:",
		"    - {name: b, local: 10.0.0.1, remote: 10.0.0.2, keying: ike}",
		"    - {name: c, local: 10.0.0.1, remote: 10.0.0.3, spi-out: 0x1001, spi-in: 0x1002}",
	)
	h, err := ParseHost([]byte(doc), "h.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if h.IPsec.Peers[0].Keying != KeyingIKE || h.IPsec.Peers[1].Keying != KeyingManual || h.IPsec.IKE.Auth() != "psk" {
		t.Fatalf("peers %+v", h.IPsec.Peers)
	}
}

func TestHostIKEErrors(t *testing.T) {
	peer := "  peers: [{name: b, local: 10.0.0.1, remote: 10.0.0.2}]"
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"no ike section", lines("ipsec:", "  keying: ike", peer), []string{"h.yaml:2: ipsec.ike: missing; keying: ike needs its authentication"}},
		{"no auth", lines("ipsec:", "  keying: ike", "  ike: {rekey-time: 1h}", peer), []string{"h.yaml:3: ipsec.ike: no authentication; give ca, cert and private-key"}},
		{"both auths", lines("ipsec:", "  keying: ike", "  ike: {psk: a.psk, ca: ca.pem}", peer), []string{"ipsec.ike.psk: give either psk or ca, cert and private-key"}},
		{"cert without key", lines("ipsec:", "  keying: ike", "  ike: {ca: ca.pem, cert: a.pem}", peer), []string{"ipsec.ike.private-key: missing"}},
		{"life before rekey", lines("ipsec:", "  keying: ike", "  ike:", "    psk: a.psk", "    rekey-time: 1h", "    life-time: 30m", peer),
			[]string{"h.yaml:6: ipsec.ike.life-time: 30m0s is not after rekey-time 1h0m0s: the SA would expire before its rekey finished"}},
		{"no unit", lines("ipsec:", "  keying: ike", "  ike: {psk: a.psk, rekey-time: 3600}", peer), []string{"ipsec.ike.rekey-time: 3600 has no unit"}},
		{"too short", lines("ipsec:", "  keying: ike", "  ike: {psk: a.psk, rekey-time: 1s}", peer), []string{"1s is too short"}},
		{"spi with ike", lines("ipsec:", "  keying: ike", "  ike: {psk: a.psk}", "  peers:", "    - name: b", "      local: 10.0.0.1", "      remote: 10.0.0.2", "      spi-out: 0x1001"),
			[]string{"h.yaml:8: ipsec.peers[0].spi-out: keying: ike chooses SPIs and reqids; remove spi-out"}},
		{"ike unused", lines("ipsec:", "  keys: a.keys", "  ike: {psk: a.psk}", "  peers: [{name: b, local: 10.0.0.1, remote: 10.0.0.2, spi-out: 0x1001, spi-in: 0x1002}]"),
			[]string{"h.yaml:3: ipsec.ike: no peer uses keying: ike"}},
		{"bad keying", lines("ipsec:", "  keying: dh", "  ike: {psk: a.psk}", peer), []string{`ipsec.keying: "dh" is not valid; use one of manual (default) or ike`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseHost([]byte(tc.doc), "h.yaml")
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestIKESecretProblem(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.psk")
	if err := os.WriteFile(p, []byte("secret"), 0o640); err != nil {
		t.Fatal(err)
	}
	if msg := IKESecretProblem(p); !strings.Contains(msg, "has mode 0640") || !strings.Contains(msg, "chmod 600") {
		t.Fatalf("0640 PSK file: %q", msg)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if msg := IKESecretProblem(p); msg != "" {
		t.Fatalf("0600 PSK file refused: %s", msg)
	}
}
