// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/diag"
	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
	"sluice/internal/mtu"
)

// `sluice mtu` and `doctor --check mtu-headroom` size a VTEP's packets
// with the one calculator (internal/mtu), so on an IPv6 underlay they give
// the same largest overlay MTU. Before they shared it, doctor counted a
// 20-byte IPv4 outer header whatever the underlay, no tunnelled VTEP header
// and GCM padding at its worst: at 9000 over IPv6 it said 8873 where
// `sluice mtu` says 8856 (over IPv4, 8893 against 8896).
func TestMTUAndDoctorAgreeOnIPv6Underlay(t *testing.T) {
	for _, tc := range []struct {
		name  string
		v6    bool
		flags []string
	}{
		{"ipv6", true, []string{"--ipv6"}},
		{"ipv4", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCLI(t, append([]string{"mtu", "--encap", "vxlan", "--esp", "tunnel", "--underlay", "9000", "--json"}, tc.flags...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var r mtu.Report
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			src, dst := "10.0.0.1", "10.0.0.2"
			if tc.v6 {
				src, dst = "2001:db8::1", "2001:db8::2"
			}
			f := &diag.Facts{
				Netdevs: []kernel.NetdevFacts{
					{Name: "bond0", Index: 10, Kind: "bond", MTU: 9000},
					{Name: "vx0", Index: 11, Kind: "vxlan", MTU: 9000, Lower: "bond0", OuterIPv6: tc.v6},
				},
				States: []xfrm.State{{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: xfrm.ProtoESP, SPI: 0x100, Mode: xfrm.ModeTunnel,
					Alg: xfrm.StateAlg{AEAD: "rfc4106(gcm(aes))", ICVBits: 128}}},
			}
			facts := filepath.Join(t.TempDir(), "facts.json")
			b, _ := json.Marshal(f)
			if err := os.WriteFile(facts, b, 0o600); err != nil {
				t.Fatal(err)
			}
			out, _ = runCLI(t, "doctor", "--facts", facts, "--check", "mtu-headroom", "--json")
			var d diag.Report
			if err := json.Unmarshal([]byte(out), &d); err != nil || len(d.Results) != 1 {
				t.Fatalf("%v\n%s", err, out)
			}
			want := fmt.Sprintf("ip link set dev vx0 mtu %d ", r.MaxOverlayMTU)
			if !strings.Contains(d.Results[0].Fix, want) {
				t.Errorf("sluice mtu: max overlay MTU %d (%s); doctor: %q", r.MaxOverlayMTU, r.MaxArithmetic, d.Results[0].Fix)
			}
		})
	}
}
