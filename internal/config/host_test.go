// SPDX-License-Identifier: Apache-2.0

package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

// hostSeed000 is the ConnectX-6 SR-IOV guide's host A: bond over two ports, VTEP on lo, VXLAN
// over ESP transport with packet offload.
var hostSeed000 = lines(
	"name: node-a",
	"uplinks:",
	"  ports: [enp3s0f0np0, 0000:03:00.1]",
	"  mtu: 9216",
	"  bond: {name: bond0, miimon: 100, primary: enp3s0f0np0}",
	"  addresses: [192.168.70.2/24]",
	"sriov:",
	"  - pf: enp3s0f0np0",
	"    vfs: 2",
	"    eswitch: switchdev",
	"    flow-steering-mode: dmfs",
	"    vf:",
	"      - {index: 0, mac: 02:00:00:00:00:01, trust: true, ipsec: [packet]}",
	"vteps:",
	"  - name: vxlan1",
	"    vni: 1024",
	"    local: 192.168.80.2",
	"    remotes: [{address: 192.168.80.3, via: 192.168.70.3}]",
	"    mtu: 3986",
	"ipsec:",
	"  keys: node-a.keys",
	"  peers:",
	"    - name: node-b",
	"      local: 192.168.80.2",
	"      remote: 192.168.80.3",
	"      spi-out: 0x1001",
	"      spi-in: 0x1002",
	"      esn: true",
	"      offload: packet",
	"      offload-dev: enp3s0f0np0",
)

func TestParseHostSeed000(t *testing.T) {
	h, err := ParseHost([]byte(hostSeed000), "/etc/sluice/host.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if h.Name != "node-a" || h.Uplinks.MTU != 9216 || h.Uplinks.Bond.Name != "bond0" || h.Uplinks.Bond.Mode != BondModeActiveBackup {
		t.Fatalf("uplinks %+v bond %+v", h.Uplinks, h.Uplinks.Bond)
	}
	if got := h.Uplinks.Ports; len(got) != 2 || got[1] != "0000:03:00.1" {
		t.Fatalf("ports %v", got)
	}
	if h.Uplinks.Addresses[0] != netip.MustParsePrefix("192.168.70.2/24") {
		t.Fatalf("addresses %v", h.Uplinks.Addresses)
	}
	s := h.SRIOV[0]
	if *s.VFs != 2 || s.Eswitch != "switchdev" || s.FlowSteering != "dmfs" || s.VF[0].MAC != "02:00:00:00:00:01" || !*s.VF[0].Trust || s.VF[0].IPsec[0] != "packet" {
		t.Fatalf("sriov %+v vf %+v", s, s.VF[0])
	}
	v := h.VTEPs[0]
	if v.Type != VTEPVXLAN || v.Port != 4789 || v.VNI != 1024 || v.MTU != 3986 || v.Remotes[0].Via != netip.MustParseAddr("192.168.70.3") {
		t.Fatalf("vtep %+v", v)
	}
	p := h.IPsec.Peers[0]
	// Defaults: transport, 128-bit keys, reqids = SPIs, ESN window 64.
	if p.Mode != ModeTransport || p.KeyBits != 128 || p.ReqidOut != 0x1001 || p.ReqidIn != 0x1002 || p.ReplayWindow != 64 || p.Offload != OffloadModePacket {
		t.Fatalf("peer %+v", p)
	}
	if got := h.KeysPath(); got != "/etc/sluice/node-a.keys" {
		t.Fatalf("keys path %q", got)
	}
}

func TestParseHostDefaults(t *testing.T) {
	h, err := ParseHost([]byte(lines(
		"uplinks: {ports: [eth0, eth1], bond: {name: bond0}}",
		"vteps:",
		"  - {name: gn0, type: geneve, vni: 7, local: 10.0.0.1, remotes: [10.0.0.2]}",
		"ipsec:",
		"  keys: /k",
		"  peers:",
		"    - {name: b, local: 10.0.0.1, remote: 10.0.0.2, spi-out: 256, spi-in: 257}",
	)), "dir/lab-host.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if h.Name != "lab-host" {
		t.Errorf("name %q, want the file's base name", h.Name)
	}
	if v := h.VTEPs[0]; v.Port != 6081 || len(v.Remotes) != 1 || v.Remotes[0].Via.IsValid() {
		t.Errorf("geneve %+v", v)
	}
	if p := h.IPsec.Peers[0]; p.ReplayWindow != 32 || p.ESN || p.Offload != OffloadModeNone || p.Mode != ModeTransport || p.KeyBits != 128 {
		t.Errorf("peer %+v", p)
	}
	if b := h.Uplinks.Bond; b.Mode != BondModeActiveBackup || b.MIIMon != 100 {
		t.Errorf("bond %+v", b)
	}
}

// TestParseHostESNDefault: packet offload (either direction) turns ESN
// on unless the file sets esn: mlx5 keeps anti-replay, and carries a
// moved SA's sequence number, only for ESN SAs (internal/driverquirk).
func TestParseHostESNDefault(t *testing.T) {
	for _, tc := range []struct {
		peer     string
		esn, def bool
		window   int
	}{
		{"offload: packet", true, true, DefaultReplayWindow},
		{"offload-in: packet", true, true, DefaultReplayWindow},
		{"offload: packet, esn: false", false, false, MaxLegacyReplay},
		{"offload: packet, esn: true", true, false, DefaultReplayWindow},
		{"offload: crypto", false, false, MaxLegacyReplay},
		{"offload: auto", false, false, MaxLegacyReplay},
	} {
		h, err := ParseHost([]byte(lines(
			"ipsec:",
			"  keys: /k",
			"  peers:",
			"    - {name: b, local: 10.0.0.1, remote: 10.0.0.2, spi-out: 256, spi-in: 257, offload-dev: eth0, "+tc.peer+"}",
		)), "h.yaml")
		if err != nil {
			t.Fatalf("%s: %v", tc.peer, err)
		}
		if p := h.IPsec.Peers[0]; p.ESN != tc.esn || p.ESNByOffload != tc.def || p.ReplayWindow != tc.window {
			t.Errorf("%s: esn %v (by offload %v), replay-window %d; want %v (%v), %d", tc.peer, p.ESN, p.ESNByOffload, p.ReplayWindow, tc.esn, tc.def, tc.window)
		}
	}
}

func TestParseHostErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string // substrings of the error, in order of lines
	}{
		{"empty", "", []string{"f.yaml:1: the file is empty; a host file needs"}},
		{"not a mapping", "- a\n", []string{"f.yaml:1: the top level must be a mapping of keys such as uplinks: and vteps:"}},
		{"only a comment", "# nothing\n", []string{"f.yaml:1: the file is empty; a host file needs at least one of uplinks:"}},
		{"unknown key", lines("uplinks:", "  port: [eth0]"), []string{"f.yaml:2: uplinks.port: unknown key; the keys here are ports, mtu, bond, addresses", "f.yaml:1: uplinks.ports: missing"}},
		{"lacp refused", lines("uplinks:", "  ports: [a, b]", "  bond: {name: bond0, mode: 802.3ad}"),
			[]string{"f.yaml:3: uplinks.bond.mode: 802.3ad is not supported; sluice bonds in active-backup mode only: the kernel offloads ESP"}},
		{"primary not a port", lines("uplinks:", "  ports: [a, b]", "  bond:", "    name: bond0", "    primary: c"),
			[]string{"f.yaml:5: uplinks.bond.primary: c is not one of uplinks.ports (a, b)"}},
		{"bond named like a port", lines("uplinks:", "  ports: [a, b]", "  bond: {name: a}"),
			[]string{"f.yaml:3: uplinks.bond.name: a is already used by uplinks.ports[0]"}},
		{"mtu too small", lines("uplinks:", "  ports: [a]", "  mtu: 60"), []string{"f.yaml:3: uplinks.mtu: 60 is below 68"}},
		{"addresses without bond", lines("uplinks:", "  ports: [a, b]", "  addresses: [10.0.0.1/24]"),
			[]string{"f.yaml:3: uplinks.addresses: with 2 ports and no bond"}},
		{"address without length", lines("uplinks:", "  ports: [a]", "  addresses: [10.0.0.1]"),
			[]string{"f.yaml:3: uplinks.addresses[0]: 10.0.0.1 has no prefix length"}},
		{"vtep problems", lines(
			"vteps:",
			"  - name: vx0",
			"    type: geneve",
			"    vni: 0",
			"    local: 10.0.0.1",
			"    remotes: [10.0.0.2, 2001:db8::1]",
			"    geneve-options: 6"),
			[]string{"f.yaml:4: vteps[0].vni: VNI 0 is reserved",
				"f.yaml:6: vteps[0].remotes: a Geneve device has one remote; 2 are listed",
				"f.yaml:6: vteps[0].remotes[1].address: 2001:db8::1 and local 10.0.0.1 are of different IP families",
				"f.yaml:7: vteps[0].geneve-options: 6 is not a multiple of 4"}},
		{"vtep missing fields", lines("vteps:", "  - name: vx0"),
			[]string{"vteps[0].vni: missing", "vteps[0].local: missing", "vteps[0].remotes: missing"}},
		{"peer problems", lines(
			"ipsec:",
			"  peers:",
			"    - name: b",
			"      local: 10.0.0.1",
			"      remote: 10.0.0.1",
			"      spi-out: 7",
			"      key-bits: 192",
			"      replay-window: 64",
			"      offload: crypto",
			"      selectors: [{local: 10.1.0.0/24, remote: 10.2.0.0/24}]",
		), []string{"f.yaml:1: ipsec.keys: missing",
			"f.yaml:5: ipsec.peers[0].remote: is the same as local",
			"f.yaml:6: ipsec.peers[0].spi-out: SPI 7 is reserved",
			"f.yaml:7: ipsec.peers[0].key-bits: 192: rfc4106(gcm(aes)) takes 128- or 256-bit",
			"f.yaml:8: ipsec.peers[0].replay-window: 64 is larger than 32, the most the kernel keeps without ESN",
			"f.yaml:9: ipsec.peers[0].offload: offload: crypto needs offload-dev",
			"f.yaml:10: ipsec.peers[0].selectors: selectors apply to tunnel mode"}},
		{"spi reused", lines(
			"ipsec:",
			"  keys: k",
			"  peers:",
			"    - {name: b, local: 10.0.0.1, remote: 10.0.0.2, spi-out: 0x1001, spi-in: 0x1002}",
			"    - {name: c, local: 10.0.0.1, remote: 10.0.0.2, spi-out: 0x1001, spi-in: 0x1003}",
		), []string{"f.yaml:5: ipsec.peers[1].spi-out: SPI 0x1001 to 10.0.0.2 is already used (line 4)"}},
		{"reqid 0", lines(
			"ipsec:",
			"  keys: k",
			"  peers:",
			"    - {name: b, local: 10.0.0.1, remote: 10.0.0.2, spi-out: 0x1001, spi-in: 0x1002, reqid-out: 0, reqid-in: 0}",
		), []string{"f.yaml:4: ipsec.peers[0].reqid-out: 0 means no reqid to the kernel", "f.yaml:4: ipsec.peers[0].reqid-in: 0 means no reqid"}},
		{"duplicate selectors", lines(
			"ipsec:",
			"  keys: k",
			"  peers:",
			"    - name: b",
			"      local: 10.0.0.1",
			"      remote: 10.0.0.2",
			"      mode: tunnel",
			"      spi-out: 0x1001",
			"      spi-in: 0x1002",
			"      selectors:",
			"        - {local: 10.1.0.0/24, remote: 10.2.0.0/24}",
			"        - {local: 10.1.0.0/24, remote: 10.2.0.0/24}",
			"    - name: c",
			"      local: 10.0.0.1",
			"      remote: 10.0.0.3",
			"      mode: tunnel",
			"      spi-out: 0x1003",
			"      spi-in: 0x1004",
			"      selectors: [{local: 10.1.0.0/24, remote: 10.2.0.0/24}]",
			"    - {name: d, local: 10.0.0.1, remote: 10.0.0.4, spi-out: 0x1005, spi-in: 0x1006}",
			"    - {name: e, local: 10.0.0.1, remote: 10.0.0.4, spi-out: 0x1007, spi-in: 0x1008}",
		), []string{"f.yaml:12: ipsec.peers[0].selectors[1]: traffic 10.1.0.0/24 to 10.2.0.0/24 is already protected (line 11)",
			"f.yaml:19: ipsec.peers[1].selectors[0]: traffic 10.1.0.0/24 to 10.2.0.0/24 is already protected (line 11)",
			"f.yaml:21: ipsec.peers[3].remote: traffic 10.0.0.1/32 to 10.0.0.4/32 is already protected (line 20)"}},
		{"vf problems", lines(
			"sriov:",
			"  - pf: 03:00.0",
			"    vf:",
			"      - {index: 3, mac: 01:00:00:00:00:01, vlan: 5000, ipsec: [full]}",
		), []string{"f.yaml:4: sriov[0].vf[0].mac: 01:00:00:00:00:01 is a multicast address",
			"sriov[0].vf[0].vlan: 5000 is out of range",
			"sriov[0].vf[0].ipsec[0]: \"full\" is not valid; use one of crypto or packet",
			"sriov[0].vfs: missing; per-VF settings need the number of VFs, such as vfs: 4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseHost([]byte(tc.doc), "f.yaml")
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.doc)
			}
			var ve *ValidationErrors
			if !errors.As(err, &ve) {
				t.Fatalf("error %T, want *ValidationErrors: %v", err, err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
		})
	}
}

func writeKeys(t *testing.T, mode os.FileMode, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "host.keys")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	key128a = "00112233445566778899aabbccddeeff01020304"
	key128b = "ffeeddccbbaa99887766554433221100a0b0c0d0"
)

func TestLoadKeys(t *testing.T) {
	p := writeKeys(t, 0o600, lines("# node-a's keys", "node-b out 0x"+key128a, "node-b in "+key128b+"   # from node-b"))
	ks, err := LoadKeys(p)
	if err != nil {
		t.Fatal(err)
	}
	out, in, err := ks.PeerKeys("node-b", 128)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 20 || len(in) != 20 || out[0] != 0x00 || in[0] != 0xff {
		t.Fatalf("keys of %d and %d bytes", len(out), len(in))
	}
	// Whatever formats a key prints <redacted>.
	for _, s := range []string{fmt.Sprint(out), fmt.Sprintf("%x %s %v %#v %q", out, out, out, out, out)} {
		if strings.Contains(s, "0011") || strings.Contains(s, "\x00") || !strings.Contains(s, Redacted) {
			t.Fatalf("a key formatted as %q", s)
		}
	}
	j, _ := json.Marshal(struct{ K Key }{out})
	if string(j) != `{"K":"\u003credacted\u003e"}` {
		t.Fatalf("JSON %s", j)
	}
	if _, _, err := ks.PeerKeys("node-b", 256); err == nil || !strings.Contains(err.Error(), "needs 36 (32 key + 4 salt), written as 72 hex digits") {
		t.Fatalf("256-bit check: %v", err)
	}
	if _, _, err := ks.PeerKeys("node-c", 128); err == nil || !strings.Contains(err.Error(), "no out key for peer node-c; add a line: node-c out 0x<40 hex digits>") {
		t.Fatalf("missing peer: %v", err)
	}
}

func TestLoadKeysRefusesReadableFiles(t *testing.T) {
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
		p := writeKeys(t, mode, "node-b out "+key128a+"\n")
		_, err := LoadKeys(p)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("has mode %04o", mode)) || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	if _, err := LoadKeys(writeKeys(t, 0o400, "node-b out "+key128a+"\n")); err != nil {
		t.Errorf("mode 0400 refused: %v", err)
	}
}

func TestKeyFileErrorsNeverEchoKeys(t *testing.T) {
	secret := "deadbeefdeadbeefdeadbeefdeadbeefcafecafe"
	body := lines(
		"node-b out "+secret+" extra",  // 4 fields
		secret+" out "+key128a,         // key where the name goes: a valid name!
		"node-b sideways "+secret,      // bad direction
		"node-b in 0x"+secret[:39],     // odd hex
		"node-b in "+key128b,           // fine
		"node-b in "+secret,            // duplicate
		"node-c out 0x"+secret+"00",    // 21 bytes: wrong length (reported by PeerKeys)
		"node-c in  0x"+secret[2:]+"f", // ok length 20
	)
	_, err := LoadKeys(writeKeys(t, 0o600, body))
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, w := range []string{":1: want three fields", ":3: the second field must be out or in", ":4: the third field is not a key in hex", ":6: a second in key for peer node-b (first on line 5)"} {
		if !strings.Contains(msg, w) {
			t.Errorf("lacks %q:\n%s", w, msg)
		}
	}
	if strings.Contains(msg, "deadbeef") || strings.Contains(msg, "cafe") {
		t.Fatalf("the error shows key material:\n%s", msg)
	}
	ks, err := LoadKeys(writeKeys(t, 0o600, lines("node-c out 0x"+secret+"00", "node-c in "+secret)))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = ks.PeerKeys("node-c", 128)
	if err == nil || strings.Contains(err.Error(), "dead") || !strings.Contains(err.Error(), ":1: peer node-c out: the key is 21 bytes") {
		t.Fatalf("PeerKeys: %v", err)
	}
	ks, _ = LoadKeys(writeKeys(t, 0o600, lines("b out "+key128a, "b in "+key128a)))
	if _, _, err := ks.PeerKeys("b", 128); err == nil || !strings.Contains(err.Error(), "same key in both directions") {
		t.Fatalf("same key both ways: %v", err)
	}
}

// A very long key line: the file limit names the file and the limit (it
// used to end in "bufio.Scanner: token too long"), and a long line within
// the limit gets its line number.
func TestLoadKeysLongLine(t *testing.T) {
	_, err := LoadKeys(writeKeys(t, 0o600, lines("node-b out "+key128a, "node-b in "+strings.Repeat("ab", 1<<20))))
	if err == nil || !strings.Contains(err.Error(), "file too large: larger than the 1 MiB limit") || strings.Contains(err.Error(), "token too long") {
		t.Errorf("2 MiB key line: %v", err)
	}
	ks, err := LoadKeys(writeKeys(t, 0o600, lines("node-b out "+key128a, "node-b in "+strings.Repeat("ab", 100<<10))))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ks.PeerKeys("node-b", 128); err == nil || !strings.Contains(err.Error(), ":2: peer node-b in: the key is 102400 bytes") {
		t.Errorf("100 KiB key: %v", err)
	}
}
