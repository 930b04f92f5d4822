// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"net/netip"
	"strings"
	"testing"

	"sluice/internal/fleet"
	"sluice/internal/kernel"
)

// A peer whose VTEP this host routes with a route sluice did not make is
// named, with the route; sluice's own routes (protocol 115, or with this
// host's VTEP as source) and routes to other addresses are not clashes.
func TestRouteClashes(t *testing.T) {
	a := netip.MustParseAddr
	me := a("10.99.0.1")
	peers := []fleet.Peer{{Name: "hv-b", VTEP: a("10.99.0.2")}, {Name: "hv-c", VTEP: a("10.99.0.3")}, {Name: "hv-d", VTEP: a("10.99.0.4")}, {Name: "hv-e", VTEP: a("10.99.0.5")}}
	routes := []kernel.Route{
		{Dst: netip.MustParsePrefix("10.99.0.2/32"), Via: a("192.0.2.2"), Src: me, Proto: kernel.RouteProtoSluice},
		{Dst: netip.MustParsePrefix("10.99.0.3/32"), Via: a("192.0.2.3"), Src: me, Proto: 3}, // an older sluice's
		{Dst: netip.MustParsePrefix("10.99.0.4/32"), Via: a("192.0.2.53"), Proto: 3},         // the operator's
		{Dst: netip.MustParsePrefix("10.99.0.0/24"), Via: a("192.0.2.254"), Proto: 4},        // covers, not the same route
	}
	got := routeClashes(peers, me, routes)
	if len(got) != 1 || !strings.Contains(got["hv-d"], "this host already has the route 10.99.0.4/32 via 192.0.2.53 (proto 3), which sluice did not create") {
		t.Fatalf("clashes %q, want hv-d's only", got)
	}
}
