// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"strings"
	"testing"

	"sluice/internal/api"
	"sluice/internal/config"
	"sluice/internal/flower"
)

// The checks gateway.yaml can only pass against the host (the user, the
// group, the interfaces, the hairpin next hop) name the file's line, like
// the parser's own errors.
func TestGatewayHostChecksNameTheLine(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"interfaces:\n  - name: lo\n  - name: nosuch0\n", `gw.yaml:3: interfaces[1].name: interface "nosuch0"`},
		{"interfaces: [{name: lo}]\napi-owner: nosuch-user\n", "gw.yaml:2: api-owner: user: unknown user nosuch-user"},
		{"interfaces: [{name: lo}]\napi-group: nosuch-group\n", "gw.yaml:2: api-group: group: unknown group nosuch-group"},
		{"interfaces: [{name: lo}]\naccept-leaks: [exact-selector-match]\n", `gw.yaml:2: accept-leaks: "exact-selector-match": the gateway accepts only no-tx-miss-rule`},
		{"interfaces:\n  - name: lo\n    inbound: forward\n    wan-antispoof: upstream\n    hairpin-to-nexthop: 127.0.0.2\n",
			"gw.yaml:2: interfaces[0] (lo) hairpin-to-nexthop: 127.0.0.2 is an address of this host"},
	} {
		g, err := config.ParseGateway([]byte(tc.yaml), "gw.yaml")
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if _, err := FromConfig(g, api.Build{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// accept-leaks: [no-tx-miss-rule] reaches the flower tier; without it the
// tier keeps outbound rules off such devices.
func TestGatewayAcceptLeaks(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want bool
	}{
		{"interfaces: [{name: lo, flower: outbound}]\n", false},
		{"interfaces: [{name: lo, flower: outbound}]\naccept-leaks: [no-tx-miss-rule]\n", true},
	} {
		g, err := config.ParseGateway([]byte(tc.yaml), "gw.yaml")
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		o, err := FromConfig(g, api.Build{})
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		tier, ok := o.Hardware.(*flower.Tier)
		if !ok || tier.AcceptNoTXMiss != tc.want {
			t.Errorf("%q: tier %+v, AcceptNoTXMiss want %v", tc.yaml, o.Hardware, tc.want)
		}
	}
}
