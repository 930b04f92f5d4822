// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/mtu"
	"sluice/internal/testutil"
)

func TestMTUCommandSeed000(t *testing.T) {
	out, err := runCLI(t, "mtu", "--underlay", "9216", "--check", "9000,9200")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"VXLAN over ESP transport mode (aes-gcm-128: IV 8, ICV 16, padding to 4) over IPv4",
		"overhead                 84-87",
		"Underlay MTU 9216: largest overlay MTU 9132",
		"Overlay MTU 9000: underlay packet 9084 bytes: fits (132 bytes to spare)",
		"Overlay MTU 9200: underlay packet 9284 bytes: does NOT fit (68 bytes over; use 9132 or less)",
		"overlay 3986: packet 4072, frame 4086 fits (10 spare), mlx5 buffer 4094 fits (2 spare)",
		"overlay 3992: packet 4076, frame 4090 fits (6 spare), mlx5 buffer 4098 does NOT fit (2 over)",
		"[8 UDP + 8 VXLAN + 14 inner Ethernet + 3986 overlay + 2 ESP trailer = 4018, +2 padding = 4020]",
		"largest overlay MTU: 3996 for the frame, 3988 for an mlx5 receive buffer",
		"Verdict: 3986 fits the page either way; 3992 fits the bare frame but not an mlx5 receive buffer",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestMTUCommandGuestAndTunnel(t *testing.T) {
	out, err := runCLI(t, "mtu", "--encap", "geneve", "--underlay", "1500")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `host MTU 1500: guest MTU <= 1416 (IPv4 TCP MSS 1376). Seed 001's "host - 100" = 1400 is safe (16 bytes to spare).`) {
		t.Errorf("guest rule:\n%s", out)
	}
	out, err = runCLI(t, "mtu", "--encap", "geneve", "--geneve-options", "20", "--underlay", "1500")
	if err != nil || !strings.Contains(out, `"host - 100" = 1400 is NOT enough here (4 bytes too big): use 1396`) {
		t.Errorf("geneve with options: %v\n%s", err, out)
	}
	out, err = runCLI(t, "mtu", "--encap", "none", "--esp", "tunnel", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var r mtu.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.OverheadMin != 54 || r.OverheadMax != 57 || r.MaxOverlayMTU != 1446 {
		t.Errorf("tunnel GCM: %d-%d, max %d", r.OverheadMin, r.OverheadMax, r.MaxOverlayMTU)
	}
	out, err = runCLI(t, "mtu", "--encap", "none", "--esp", "tunnel", "--cipher", "aes-cbc-hmac-sha256", "--ipv6", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.OverheadMin != 82 || r.OverheadMax != 97 {
		t.Errorf("IPv6 CBC: %v %d-%d", err, r.OverheadMin, r.OverheadMax)
	}
	for _, args := range [][]string{
		{"mtu", "--cipher", "des"},
		{"mtu", "--encap", "gre"},
		{"mtu", "--geneve-options", "6", "--encap", "geneve"},
		{"mtu", "--underlay", "20"},
	} {
		if _, err := runCLI(t, args...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// writeHost writes a host file and its key file (with keyMode) in a temp
// directory.
func writeHost(t *testing.T, body string, keyMode os.FileMode) string {
	t.Helper()
	dir := t.TempDir()
	f := filepath.Join(dir, "host.yaml")
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	k := filepath.Join(dir, "host.keys")
	if err := os.WriteFile(k, []byte("b out 00112233445566778899aabbccddeeff01020304\nb in ffeeddccbbaa99887766554433221100a0b0c0d0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(k, keyMode); err != nil {
		t.Fatal(err)
	}
	return f
}

// overlayHost uses lo as its uplink: it exists in every namespace, and
// plan changes nothing.
const overlayHost = `uplinks:
  ports: [lo]
  mtu: 1600
vteps:
  - name: vxtest0
    vni: 77
    local: 10.77.0.1
    remotes: [{address: 10.77.0.2, via: 127.0.0.2}]
    mtu: MTU
ipsec:
  keys: host.keys
  peers:
    - {name: b, local: 10.77.0.1, remote: 10.77.0.2, spi-out: 0x7001, spi-in: 0x7002}
`

func TestPlanRefusesReadableKeyFile(t *testing.T) {
	f := writeHost(t, strings.Replace(overlayHost, "MTU", "1500", 1), 0o644)
	for _, cmd := range []string{"plan", "apply", "verify"} {
		out, err := runCLI(t, cmd, "-f", f)
		if err == nil || !strings.Contains(err.Error(), "ipsec.keys (line 11): key file refused:") || !strings.Contains(err.Error(), "has mode 0644") {
			t.Errorf("%s: %v\n%s", cmd, err, out)
		}
	}
}

func TestPlanRefusesOversizedMTUWithTheNumbers(t *testing.T) {
	testutil.RequireRoot(t, "plan dumps the XFRM database")
	f := writeHost(t, strings.Replace(overlayHost, "MTU", "1520", 1), 0o600)
	_, err := runCLI(t, "plan", "-f", f)
	// VXLAN over ESP transport: 1520 + 84 = 1604 > 1600; 1516 fits.
	for _, w := range []string{"vteps[0] (vxtest0): mtu 1520 does not fit the uplink MTU 1600",
		"+ 1520 overlay + 2 ESP trailer = 1552, +0 padding = 1552] + 16 ESP ICV = 1604", "use mtu 1516 or less"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q: %v", w, err)
		}
	}
}

func TestPlanAndDryRunRedactKeys(t *testing.T) {
	testutil.RequireRoot(t, "plan dumps the XFRM database")
	f := writeHost(t, strings.Replace(overlayHost, "MTU", "1500", 1), 0o600)
	for _, args := range [][]string{{"plan", "-f", f}, {"plan", "-f", f, "--json"}, {"apply", "--dry-run", "-f", f}, {"apply", "--dry-run", "--json", "-f", f}} {
		out, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if !strings.Contains(out, "<redacted>") && !strings.Contains(out, `\u003credacted\u003e`) {
			t.Errorf("%v: no <redacted> in\n%s", args, out)
		}
		for _, k := range []string{"0011223344", "ffeeddccbb", "00 11 22"} {
			if strings.Contains(out, k) {
				t.Fatalf("%v shows key material:\n%s", args, out)
			}
		}
	}
	out, err := runCLI(t, "plan", "-f", f, "--exit-code")
	if ExitCode(err) != ExitCheckFailed || !strings.Contains(out, "ip link add vxtest0 type vxlan id 77 local 10.77.0.1 remote 10.77.0.2 dstport 4789 mtu 1500") {
		t.Errorf("--exit-code: %v\n%s", err, out)
	}
}
