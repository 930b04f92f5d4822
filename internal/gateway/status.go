// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"sort"
	"strings"
	"time"

	"sluice/internal/api"
	"sluice/internal/fastpath"
	"sluice/internal/kernel"
)

// gatewayRuntime is a running gateway as the API sees it.
type gatewayRuntime struct {
	opts    Options
	dp      *fastpath.Datapath
	mirror  *fastpath.Mirror
	started time.Time
	pins    pinStatus
}

var _ api.Provider = (*gatewayRuntime)(nil)

// Status implements api.Provider.
func (r *gatewayRuntime) Status() (*api.GatewayStatus, error) {
	counts, err := r.dp.ReasonCounts()
	if err != nil {
		return nil, err
	}
	ms := r.mirror.Status()
	// What the program does, not what the mirror last did: the lease may
	// have run out under a stopped daemon, or another process may have
	// closed the fast path. In sync means both.
	open, err := r.dp.Open()
	if err != nil {
		return nil, err
	}
	state := ms.State
	if ms.InSync && !open {
		state = "closed-under-us"
	}
	ps := r.pins.get()
	s := &api.GatewayStatus{
		Version: r.opts.Build.Version, Commit: r.opts.Build.Commit, Started: r.started,
		PolicySource: r.opts.SourceName, PinDir: r.opts.PinDir, FastPathOpen: open,
		Pins: api.PinStatus{OK: ps.OK, Missing: ps.Missing, Repairs: ps.Repairs, LastError: ps.LastError},
		Mirror: api.MirrorStatus{
			InSync: ms.InSync && open, State: state, KernelPolicies: ms.KernelPolicies, KernelStates: ms.KernelStates,
			MirroredPolicies: ms.MirroredPolicies, TuplesIPv4: ms.Tuples[0], TuplesIPv6: ms.Tuples[1],
			Syncs: ms.Syncs, Resyncs: ms.Resyncs, Verified: ms.Verified, Divergences: ms.Divergences,
			LeaseLapses: ms.LeaseLapses, LastSync: ms.LastSync, LastSyncDuration: ms.LastSyncDuration,
			LastError: ms.LastError,
		},
		Unknown: reasonMap(counts[0]),
	}
	// What the kernel has attached, not what the daemon once attached:
	// a port without the program forwards nothing in XDP.
	var closed []string
	if r.opts.Hardware != nil {
		fs := r.opts.Hardware.FlowerStatus()
		s.Flower = &fs
	}
	if c, err := r.dp.CacheStats(); err == nil {
		s.FlowCache = api.FlowCacheStatus{Hits: c.Hits, Fills: c.Fills, Bypassed: c.Bypassed, PassHits: c.PassHits, PassFills: c.PassFills}
	}
	if l4, err := r.dp.FlowCacheKeysL4(); err == nil {
		s.FlowCache.KeysL4 = l4
	}
	for _, gi := range r.opts.Ifaces {
		is := api.InterfaceStatus{Name: gi.Name, XDPMode: gi.Mode.String(), L2: gi.L2.String(),
			InboundForward: gi.InboundForward}
		if li, err := kernel.Link(gi.Name); err == nil {
			is.Ifindex, is.VLAN = li.Ifindex, li.VLANID
			is.Attached = true // a VLAN child's frames meet the parent's program
			if li.ParentIfindex != 0 {
				if p, err := kernel.LinkByIndex(li.ParentIfindex); err == nil {
					is.Parent = p.Name
				}
				is.XDPMode = "via parent"
			} else if why := r.dp.AttachedTo(gi.Name, li.Ifindex); why != "" {
				is.Attached, is.Problem = false, why
			}
		} else {
			is.Problem = "the interface is gone; the daemon attaches again when it comes back"
		}
		if !is.Attached {
			closed = append(closed, gi.Name+": "+is.Problem)
		}
		is.Reasons = reasonMap(counts[is.Ifindex])
		if gi.HairpinNextHop.IsValid() {
			nh := &api.NextHop{Addr: gi.HairpinNextHop.String()}
			if idx, mac, err := resolveNextHop(gi.HairpinNextHop); err != nil {
				nh.Error = err.Error()
			} else {
				nh.Resolved, nh.MAC = true, mac.String()
				if l, err := kernel.LinkByIndex(idx); err == nil {
					nh.Via = l.Name
				}
			}
			is.NextHop = nh
		}
		s.Interfaces = append(s.Interfaces, is)
	}
	if len(closed) > 0 {
		s.FastPathOpen, s.Mirror.InSync, s.Mirror.State = false, false, "closed"
		s.ClosedReason = "not attached: " + strings.Join(closed, "; ")
	}
	return s, nil
}

func reasonMap(m map[fastpath.Reason]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for r, n := range m {
		out[r.String()] = n
	}
	return out
}

// Policies implements api.Provider.
func (r *gatewayRuntime) Policies() ([]api.PolicyStat, error) {
	cs, err := r.dp.PolicyCounts()
	if err != nil {
		return nil, err
	}
	out := make([]api.PolicyStat, 0, len(cs))
	for _, c := range cs {
		ps := api.PolicyStat{Index: c.Index, Packets: c.Packets, Bytes: c.Bytes}
		if p, ok := r.mirror.Policy(c.Index); ok {
			ps.Dir, ps.Priority, ps.Selector = p.Dir.String(), p.Priority, p.Sel.String()
		}
		out = append(out, ps)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Packets > out[b].Packets })
	return out, nil
}
