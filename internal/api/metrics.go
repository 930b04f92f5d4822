// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultTopPolicies bounds the per-policy series: the N busiest policies
// get their own label, the rest are summed under policy="other", so 65,536
// tunnels do not make 65,536 series.
const DefaultTopPolicies = 50

// Build identifies the binary in sluice_build_info.
type Build struct{ Version, Commit, GoVersion string }

var (
	descPackets  = prometheus.NewDesc("sluice_fastpath_packets_total", "Packets seen by the XDP fast path, by ingress interface and verdict reason.", []string{"iface", "reason"}, nil)
	descPolPkts  = prometheus.NewDesc("sluice_policy_packets_total", "Packets decided by each XFRM policy in the fast path (top N by packets; the rest as policy=\"other\").", []string{"policy", "dir"}, nil)
	descPolBytes = prometheus.NewDesc("sluice_policy_bytes_total", "Bytes decided by each XFRM policy in the fast path (same labels as sluice_policy_packets_total).", []string{"policy", "dir"}, nil)
	descPolicies = prometheus.NewDesc("sluice_mirror_policies", "XFRM policies in the kernel and mirrored into the fast path.", []string{"where"}, nil)
	descInSync   = prometheus.NewDesc("sluice_mirror_in_sync", "1 when the fast path mirrors the kernel; 0 while it is closed (everything goes to the kernel).", nil, nil)
	descResyncs  = prometheus.NewDesc("sluice_mirror_resyncs_total", "Full resynchronisations after lost XFRM events.", nil, nil)
	descSyncs    = prometheus.NewDesc("sluice_mirror_syncs_total", "Fast-path table rebuilds.", nil, nil)
	descNextHop  = prometheus.NewDesc("sluice_nexthop_resolved", "1 when the interface's hairpin next hop is resolved.", []string{"iface", "nexthop"}, nil)
	descCache    = prometheus.NewDesc("sluice_flow_cache_packets_total", "Packets by what the flow cache did: hit (forward replayed), fill (forward decided in full, remembered), bypass (decided in full while the cache was off for thrashing), pass_hit and pass_fill (the same for inbound passes).", []string{"result"}, nil)
	descCacheL4  = prometheus.NewDesc("sluice_flow_cache_keys_l4", "1 when flow-cache entries are per connection (a policy or the FIB looks at ports), 0 when per host pair.", nil, nil)
	descOpen     = prometheus.NewDesc("sluice_fastpath_open", "1 when the XDP program forwards (tables ready, lease current); 0 while everything goes to the kernel.", nil, nil)
	descAttached = prometheus.NewDesc("sluice_xdp_attached", "1 when the kernel has the daemon's XDP program on the interface (checked against its attachments); 0 while it is missing (the daemon re-attaches when it can).", []string{"iface"}, nil)
	descPinsOK   = prometheus.NewDesc("sluice_pins_ok", "1 when every map and link is pinned under the pin dir; 0 after they were removed and could not be pinned again.", nil, nil)
	descRepins   = prometheus.NewDesc("sluice_pin_repairs_total", "Times pins removed under the daemon were pinned again.", nil, nil)
	descFlower   = prometheus.NewDesc("sluice_flower_rules", "Flower tier: hardware rules installed now.", nil, nil)
	descFlowerEv = prometheus.NewDesc("sluice_flower_events_total", "Flower tier events: rules added, removed, refused (by the device), withdrawn (straight from an XFRM event), tunnels promoted into the NIC and demoted back to XDP.", []string{"event"}, nil)
	descBuild    = prometheus.NewDesc("sluice_build_info", "Build information; always 1.", []string{"version", "commit", "goversion"}, nil)
)

type collector struct {
	p     Provider
	topN  int
	build Build
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPackets, descPolPkts, descPolBytes, descPolicies, descInSync, descResyncs, descSyncs, descNextHop, descCache, descCacheL4, descOpen, descAttached, descPinsOK, descRepins, descFlower, descFlowerEv, descBuild} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descBuild, prometheus.GaugeValue, 1, c.build.Version, c.build.Commit, c.build.GoVersion)
	s, err := c.p.Status()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descPackets, err)
		return
	}
	for _, i := range s.Interfaces {
		for r, n := range i.Reasons {
			ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(n), i.Name, r)
		}
		ch <- prometheus.MustNewConstMetric(descAttached, prometheus.GaugeValue, b2f(i.Attached), i.Name)
		if i.NextHop != nil {
			ch <- prometheus.MustNewConstMetric(descNextHop, prometheus.GaugeValue, b2f(i.NextHop.Resolved), i.Name, i.NextHop.Addr)
		}
	}
	for r, n := range s.Unknown {
		ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(n), "unknown", r)
	}
	ch <- prometheus.MustNewConstMetric(descPolicies, prometheus.GaugeValue, float64(s.Mirror.KernelPolicies), "kernel")
	ch <- prometheus.MustNewConstMetric(descPolicies, prometheus.GaugeValue, float64(s.Mirror.MirroredPolicies), "mirrored")
	ch <- prometheus.MustNewConstMetric(descInSync, prometheus.GaugeValue, b2f(s.Mirror.InSync))
	ch <- prometheus.MustNewConstMetric(descOpen, prometheus.GaugeValue, b2f(s.FastPathOpen))
	ch <- prometheus.MustNewConstMetric(descPinsOK, prometheus.GaugeValue, b2f(s.Pins.OK))
	ch <- prometheus.MustNewConstMetric(descRepins, prometheus.CounterValue, float64(s.Pins.Repairs))
	ch <- prometheus.MustNewConstMetric(descResyncs, prometheus.CounterValue, float64(s.Mirror.Resyncs))
	ch <- prometheus.MustNewConstMetric(descSyncs, prometheus.CounterValue, float64(s.Mirror.Syncs))
	fc := s.FlowCache
	for _, r := range []struct {
		name string
		n    uint64
	}{{"hit", fc.Hits}, {"fill", fc.Fills}, {"bypass", fc.Bypassed}, {"pass_hit", fc.PassHits}, {"pass_fill", fc.PassFills}} {
		ch <- prometheus.MustNewConstMetric(descCache, prometheus.CounterValue, float64(r.n), r.name)
	}
	ch <- prometheus.MustNewConstMetric(descCacheL4, prometheus.GaugeValue, b2f(fc.KeysL4))
	if f := s.Flower; f != nil {
		ch <- prometheus.MustNewConstMetric(descFlower, prometheus.GaugeValue, float64(f.RulesInstalled))
		for _, e := range []struct {
			name string
			n    uint64
		}{{"added", f.RulesAdded}, {"removed", f.RulesRemoved}, {"refused", f.RulesRefused}, {"withdrawn", f.RulesWithdrawn}, {"promoted", f.Promotions}, {"demoted", f.Demotions}} {
			ch <- prometheus.MustNewConstMetric(descFlowerEv, prometheus.CounterValue, float64(e.n), e.name)
		}
	}

	ps, err := c.p.Policies()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descPolPkts, err)
		return
	}
	sort.Slice(ps, func(a, b int) bool { return ps[a].Packets > ps[b].Packets })
	var otherP, otherB uint64
	for n, p := range ps {
		if n < c.topN {
			id := strconv.FormatUint(uint64(p.Index), 10)
			ch <- prometheus.MustNewConstMetric(descPolPkts, prometheus.CounterValue, float64(p.Packets), id, p.Dir)
			ch <- prometheus.MustNewConstMetric(descPolBytes, prometheus.CounterValue, float64(p.Bytes), id, p.Dir)
			continue
		}
		otherP += p.Packets
		otherB += p.Bytes
	}
	if len(ps) > c.topN {
		ch <- prometheus.MustNewConstMetric(descPolPkts, prometheus.CounterValue, float64(otherP), "other", "")
		ch <- prometheus.MustNewConstMetric(descPolBytes, prometheus.CounterValue, float64(otherB), "other", "")
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// MetricsHandler serves p's metrics in the Prometheus text format.
func MetricsHandler(p Provider, topN int, build Build) http.Handler {
	if topN <= 0 {
		topN = DefaultTopPolicies
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{p: p, topN: topN, build: build})
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// ServeMetrics serves /metrics on l until ctx ends, within DefaultLimits.
// The daemon binds l (net.Listen("tcp", metrics-listen)) before it attaches
// anything, so a bad address fails the start with nothing to undo.
func ServeMetrics(ctx context.Context, l net.Listener, h http.Handler) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv := newServer(mux)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := serveLimited(srv, l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
