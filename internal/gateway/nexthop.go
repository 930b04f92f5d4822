// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"sluice/internal/fastpath"
	"sluice/internal/kernel"
)

// ResolveIfaces turns names into ifindexes, VLAN parents and next hops.
func ResolveIfaces(gis []Iface) ([]fastpath.Iface, error) {
	var out []fastpath.Iface
	for _, gi := range gis {
		li, err := link(gi.Name)
		if err != nil {
			return nil, err
		}
		i := fastpath.Iface{Ifindex: li.Ifindex, L2: gi.L2, InboundForward: gi.InboundForward,
			VLANID: li.VLANID, ParentIfindex: li.ParentIfindex}
		if gi.HairpinNextHop.IsValid() {
			idx, mac, err := resolveNextHop(gi.HairpinNextHop)
			if err != nil {
				return nil, fmt.Errorf("%s: hairpin-to-nexthop: %w", gi.Name, err)
			}
			eg, err := kernel.LinkByIndex(idx)
			if err != nil {
				return nil, err
			}
			i.HairpinIfindex, i.HairpinDstMAC, i.HairpinSrcMAC = idx, mac, eg.MAC
		}
		out = append(out, i)
	}
	return out, nil
}

// refreshNextHops re-resolves hairpin next hops when neighbours or routes
// change, which also invalidates the flow cache (SetIfaces bumps the route
// epoch). A one-second tick bumps the epoch regardless, so a lost event
// (or a watcher that could not start) leaves cached forwards at most a
// second stale.
func refreshNextHops(ctx context.Context, dp *fastpath.Datapath, resolve func() ([]fastpath.Iface, error), log *slog.Logger) {
	ch, err := kernel.WatchNeighRoutes(ctx)
	if err != nil {
		log.Warn("not following neighbour/route changes; next hops resolve once and the flow cache expires every second", "err", err)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			// Rule events come with route events (WatchNeighRoutes);
			// the tick catches what a lost event would have said.
			followFIBL4(dp, log)
			followFIBDst(dp, log)
			if err := dp.BumpRouteEpoch(); err != nil {
				log.Error("expiring the flow cache", "err", err)
			}
		case _, ok := <-ch:
			if !ok {
				ch = nil
				continue
			}
			followFIBL4(dp, log)
			followFIBDst(dp, log)
			ifs, err := resolve()
			if err != nil {
				log.Warn("re-resolving next hops", "err", err)
				if err := dp.BumpRouteEpoch(); err != nil {
					log.Error("expiring the flow cache", "err", err)
				}
				continue
			}
			if err := dp.SetIfaces(ifs); err != nil {
				log.Error("updating interfaces", "err", err)
			}
		}
	}
}

// followFIBL4 keeps the flow cache's key in step with the FIB: per host
// pair while routing ignores protocol and ports, per connection once a
// rule or the multipath hash looks at them.
func followFIBL4(dp *fastpath.Datapath, log *slog.Logger) {
	l4, why := kernel.FIBUsesL4()
	changed, err := dp.SetFIBUsesL4(l4)
	switch {
	case err != nil:
		log.Error("setting the flow cache's key", "err", err)
	case changed && l4:
		log.Info("flow cache keys on protocol and ports", "because", why)
	case changed:
		log.Info("flow cache keys on addresses only: routing no longer looks at protocol or ports")
	}
}

// followFIBDst lets the fast path reuse FIB answers per destination while
// the kernel's FIB answers from the destination alone (no policy rules but
// the default ones, no multipath route), and stops it as soon as that is no
// longer so: called on every route, neighbour and rule event and every
// second, before the epoch bump that follows each.
func followFIBDst(dp *fastpath.Datapath, log *slog.Logger) {
	on, why := kernel.FIBByDestination()
	changed, err := dp.SetFIBDstOnly(on)
	switch {
	case err != nil:
		log.Error("setting the FIB result cache", "err", err)
	case changed && on:
		log.Info("FIB answers reused per destination: default policy rules, no multipath routes")
	case changed:
		log.Info("FIB answers not reused: every first packet asks the FIB", "because", why)
	}
}
