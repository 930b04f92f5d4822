// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"strings"
	"testing"

	"sluice/internal/fastpath"
)

// TestDeriveKeepsRulesOffLeakyDevices: an outbound rule goes only into a
// device that encrypts every packet it redirects (issue 31). A subnet
// selector on an exact-match driver and any OUT policy on a driver that
// sends an SA miss in cleartext stay with XDP, with a reason that names
// the row; per-host selectors are exact on any driver; the inbound rule (whose egress holds no IPsec) is not affected.
func TestDeriveKeepsRulesOffLeakyDevices(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src, dst string
		q        DeviceQuirks
		skip     string // "": an outbound rule
	}{
		{"no quirks, subnets", "16.0.0.0/16", "48.0.0.0/16", DeviceQuirks{}, ""},
		{"exact match, subnets", "16.0.0.0/16", "48.0.0.0/16", DeviceQuirks{ExactSelectors: true, As: "mlx5_core 6.12.95"}, "exact-selector-match"},
		{"exact match, a subnet source", "16.0.0.0/16", "48.0.0.1/32", DeviceQuirks{ExactSelectors: true}, "exact-selector-match"},
		{"exact match, per host", "16.0.0.1/32", "48.0.0.1/32", DeviceQuirks{ExactSelectors: true}, ""},
		{"exact match, IPv6 per host", "2001:db8:16::1/128", "2001:db8:48::1/128", DeviceQuirks{ExactSelectors: true}, ""},
		{"exact match, IPv6 subnets", "2001:db8:16::/64", "2001:db8:48::/48", DeviceQuirks{ExactSelectors: true}, "exact-selector-match"},
		{"SA miss sends cleartext", "16.0.0.1/32", "48.0.0.1/32", DeviceQuirks{NoTXMiss: true}, "no-tx-miss-rule"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pols, states := tunnel(tc.src, tc.dst, 100, p0)
			res := Derive(Input{Views: fastpath.PolicyViews(withMTU(fastpath.Snapshot{Policies: pols, States: states})), Ports: ports(true),
				Router: fakeRouter{}, InboundChain: 1, Quirks: map[int]DeviceQuirks{p0: tc.q}})
			var out, in int
			for _, r := range forwards(res) {
				if r.Dir == Outbound {
					out++
				} else {
					in++
				}
			}
			if v4 := !strings.Contains(tc.src, ":"); v4 && in != 1 {
				t.Errorf("%d inbound rules, want 1 (quirks of the TX path do not touch it); skips %v", in, res.Skips)
			}
			if tc.skip == "" {
				if out != 1 {
					t.Errorf("no outbound rule; skips %v", res.Skips)
				}
				return
			}
			if out != 0 || len(res.Skips) == 0 || !strings.Contains(res.Skips[0].Reason, tc.skip) {
				t.Errorf("want the outbound rule skipped for %s, got %d rules, skips %v", tc.skip, out, res.Skips)
			}
		})
	}
}

func TestDeriveSkipsReqid0(t *testing.T) {
	pols, states := tunnel("16.0.0.1/32", "48.0.0.1/32", 100, p0)
	pols[0].Tmpls[0].Reqid = 0
	for i := range states {
		states[i].Reqid = 0
	}
	res := derive(withMTU(fastpath.Snapshot{Policies: pols, States: states}), ports(false))
	if len(forwards(res)) != 0 || len(res.Skips) != 1 || !strings.Contains(res.Skips[0].Reason, "reqid0-cleartext") {
		t.Fatalf("a reqid-0 template got a rule, or no reason: %v %v", res.Rules, res.Skips)
	}
}

// accept-leaks: no-tx-miss-rule puts the outbound rule back on such a
// device, and nothing else: an exact-match driver's subnet stays off.
func TestAcceptNoTXMiss(t *testing.T) {
	for _, tc := range []struct {
		name     string
		accept   bool
		q        DeviceQuirks
		accepted bool
		want     DeviceQuirks
	}{
		{"not accepted", false, DeviceQuirks{NoTXMiss: true, As: "mlx5_core 6.12"}, false, DeviceQuirks{NoTXMiss: true, As: "mlx5_core 6.12"}},
		{"accepted", true, DeviceQuirks{NoTXMiss: true, As: "mlx5_core 6.12"}, true, DeviceQuirks{As: "mlx5_core 6.12, no-tx-miss-rule accepted (accept-leaks)"}},
		{"accepted, exact match stays", true, DeviceQuirks{NoTXMiss: true, ExactSelectors: true}, true, DeviceQuirks{ExactSelectors: true, As: ", no-tx-miss-rule accepted (accept-leaks)"}},
		{"nothing to accept", true, DeviceQuirks{As: "veth"}, false, DeviceQuirks{As: "veth"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, accepted := (&Tier{AcceptNoTXMiss: tc.accept}).accept(tc.q)
			if got != tc.want || accepted != tc.accepted {
				t.Errorf("accept(%+v) = %+v, %v; want %+v, %v", tc.q, got, accepted, tc.want, tc.accepted)
			}
			pols, states := tunnel("16.0.0.1/32", "48.0.0.1/32", 100, p0)
			res := Derive(Input{Views: fastpath.PolicyViews(withMTU(fastpath.Snapshot{Policies: pols, States: states})), Ports: ports(true),
				Router: fakeRouter{}, InboundChain: 1, Quirks: map[int]DeviceQuirks{p0: got}})
			out := 0
			for _, r := range forwards(res) {
				if r.Dir == Outbound {
					out++
				}
			}
			if wantOut := !got.NoTXMiss; (out == 1) != wantOut { // a per-host tunnel: exact matching keeps it
				t.Errorf("%d outbound rules for a per-host tunnel with %+v; skips %v", out, got, res.Skips)
			}
		})
	}
}
