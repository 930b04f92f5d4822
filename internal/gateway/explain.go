// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"sluice/internal/api"
	"sluice/internal/config"
	"sluice/internal/fastpath"
	"sluice/internal/kernel/xfrm"
)

// StaticDatapath loads the fast path over tables built from a gateway.yaml
// with static policies, as the daemon builds them, but without attaching
// or pinning anything: `sluice gateway explain -f` runs packets through it
// with no daemon. It returns the policies the tables came from.
func StaticDatapath(g *config.Gateway, build api.Build) (*fastpath.Datapath, []xfrm.Policy, error) {
	opts, err := FromConfig(g, build)
	if err != nil {
		return nil, nil, err
	}
	snap, _ := opts.Source.Dump()
	ifs, err := ResolveIfaces(opts.Ifaces)
	if err != nil {
		return nil, nil, err
	}
	dp, err := fastpath.Load(fastpath.LoadOptions{})
	if err != nil {
		return nil, nil, err
	}
	fastpath.FillRouteMTU(&snap, nil) // the SAs' MTUs, from this host's routes
	tables, err := fastpath.Compile(snap)
	if err == nil {
		err = dp.SetIfaces(ifs)
	}
	if err == nil {
		err = dp.Apply(tables)
	}
	if err != nil {
		dp.Close()
		return nil, nil, err
	}
	return dp, snap.Policies, nil
}
