// SPDX-License-Identifier: Apache-2.0

package config

import (
	"strings"
	"testing"
)

// Offload per direction (the ixgbevf VF-offload patches: ixgbevf offloads inbound SAs only):
// offload is the shorthand for both, offload-out/offload-in override it.
func TestParseHostOffloadPerDirection(t *testing.T) {
	peer := func(extra ...string) string {
		return lines(append([]string{
			"ipsec:",
			"  keys: k.keys",
			"  peers:",
			"    - name: p",
			"      local: 10.0.0.1",
			"      remote: 10.0.0.2",
			"      spi-out: 0x1001",
			"      spi-in: 0x1002",
		}, extra...)...)
	}
	for _, tc := range []struct {
		doc     string
		out, in string
	}{
		{peer(), OffloadModeNone, OffloadModeNone},
		{peer("      offload: auto", "      offload-dev: eth0"), OffloadModeAuto, OffloadModeAuto},
		{peer("      offload-in: crypto", "      offload-dev: eth0"), OffloadModeNone, OffloadModeCrypto},
		{peer("      offload: crypto", "      offload-out: none", "      offload-dev: eth0"), OffloadModeNone, OffloadModeCrypto},
		{peer("      offload: packet", "      offload-in: auto", "      offload-dev: eth0"), OffloadModePacket, OffloadModeAuto},
	} {
		h, err := ParseHost([]byte(tc.doc), "f.yaml")
		if err != nil {
			t.Fatalf("%s: %v", tc.doc, err)
		}
		pr := &h.IPsec.Peers[0]
		if pr.OffloadFor("out") != tc.out || pr.OffloadFor("in") != tc.in {
			t.Errorf("%s: out %q in %q, want %q %q", tc.doc, pr.OffloadOut, pr.OffloadIn, tc.out, tc.in)
		}
	}
	for _, tc := range []struct{ doc, want string }{
		{peer("      offload-in: crypto"), "f.yaml:9: ipsec.peers[0].offload-in: offload-in: crypto needs offload-dev"},
		{peer("      offload-out: sometimes"), `f.yaml:9: ipsec.peers[0].offload-out: "sometimes" is not valid; use one of none, crypto, packet or auto`},
		{peer("      offload-in: none", "      offload-dev: eth0"), "ipsec.peers[0].offload-dev: has no effect with offload: none"},
	} {
		_, err := ParseHost([]byte(tc.doc), "f.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.doc, err, tc.want)
		}
	}
}
