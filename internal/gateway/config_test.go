// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"strings"
	"testing"

	"sluice/internal/api"
	"sluice/internal/config"
)

// The checks gateway.yaml can only pass against the host (the user, the
// group, the interfaces, the hairpin next hop) name the file's line, like
// the parser's own errors.
func TestGatewayHostChecksNameTheLine(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"interfaces:\n  - name: lo\n  - name: nosuch0\n", `gw.yaml:3: interfaces[1].name: interface "nosuch0"`},
		{"interfaces: [{name: lo}]\napi-owner: nosuch-user\n", "gw.yaml:2: api-owner: user: unknown user nosuch-user"},
		{"interfaces: [{name: lo}]\napi-group: nosuch-group\n", "gw.yaml:2: api-group: group: unknown group nosuch-group"},
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
