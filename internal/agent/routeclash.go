// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"
	"net/netip"

	"sluice/internal/fleet"
	"sluice/internal/kernel"
	"sluice/internal/overlay"
)

// routeClashes names the peers whose VTEP this host already routes with a
// route sluice did not make (a storage VIP, a DNS server the fabric
// routes elsewhere), with the route. The engine would refuse the whole
// plan for one of them; the agent leaves out only those peers, and every
// other pair is applied.
func routeClashes(peers []fleet.Peer, myVTEP netip.Addr, routes []kernel.Route) map[string]string {
	var out map[string]string
	for _, p := range peers {
		dst := netip.PrefixFrom(p.VTEP, p.VTEP.BitLen())
		for i := range routes {
			r := &routes[i]
			if r.Dst != dst || overlay.SluiceMadeRoute(r, myVTEP) {
				continue
			}
			if out == nil {
				out = map[string]string{}
			}
			via := "-"
			if r.Via.IsValid() {
				via = r.Via.String()
			}
			out[p.Name] = fmt.Sprintf("this host already has the route %s via %s (proto %d), which sluice did not create, to its VTEP; sluice never replaces it: remove it if it is stale (ip route del %s), or give the host another VTEP from the pool", dst, via, r.Proto, dst)
		}
	}
	return out
}

// leaveOutRouteClashes renders again without the peers whose VTEP route
// would clash on this host (read in the host's namespace). A failed read
// leaves d as it is: the engine's own check still refuses a clash.
func (a *Agent) leaveOutRouteClashes(d fleet.Desired, myVTEP string, render func(fleet.Local) fleet.Desired) fleet.Desired {
	if len(d.Peers) == 0 || d.Refused {
		return d
	}
	my, err := netip.ParseAddr(myVTEP)
	if err != nil {
		return d
	}
	var routes []kernel.Route
	if err := a.rec.InNS(func() error { routes, err = kernel.Routes(); return err }); err != nil {
		return d
	}
	clash := routeClashes(d.Peers, my, routes)
	if len(clash) == 0 {
		return d
	}
	l := a.o.Local
	l.LeaveOut = clash
	return render(l)
}
