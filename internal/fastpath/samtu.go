// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netns"

	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
	"sluice/internal/mtu"
)

// saMTU is the largest packet the fast path may forward under a policy's
// template: the smallest MTU among the SAs the template can resolve to
// (during a rekey both exist, and the kernel may pick either), each
// xfrm_state_mtu of the route under it, as the kernel's bundle has it
// (xfrm_init_pmtu). 0 when one of them cannot be sized: an algorithm sluice
// does not know, or no route MTU; nothing is then forwarded through it.
func saMTU(tm xfrm.Tmpl, states []xfrm.State, routeMTU map[Endpoints]int) int {
	best := 0
	for i := range states {
		st := &states[i]
		if !tmplMatches(tm, st) {
			continue
		}
		m := stateMTU(st, routeMTU[Endpoints{Src: st.Src, Dst: st.Dst}])
		if m <= 0 {
			return 0
		}
		if best == 0 || m < best {
			best = m
		}
	}
	return min(best, 0xffff)
}

// stateMTU is xfrm_state_mtu(st, route) for an ESP SA, 0 when unknown.
func stateMTU(st *xfrm.State, route int) int {
	if route <= 0 || st.Proto != xfrm.ProtoESP {
		return 0
	}
	a := st.Alg
	iv, block, icv, err := mtu.Transform{AEAD: a.AEAD, ICVBits: a.ICVBits, Crypt: a.Crypt, Auth: a.Auth, AuthTruncBits: a.AuthTruncBits}.Sizes()
	if err != nil || (a.AEAD == "" && a.Crypt == "" && a.Auth == "") {
		return 0
	}
	sa := mtu.SA{Mode: mtu.SAMode(st.Mode), OuterIPv6: st.Dst.Is6() && !st.Dst.Is4In6(), SelectorIPv6: st.Sel.Src.Addr().Is6(),
		IV: iv, Block: block, ICV: icv, Encap: mtu.SAEncap(a.Encap), ESN: a.ESN}
	return sa.MTU(route)
}

// tmplMatches: st is an SA the kernel may use for template tm
// (xfrm_state_find's comparison, as packetOffloadDevice makes it).
func tmplMatches(tm xfrm.Tmpl, st *xfrm.State) bool {
	return st.Proto == tm.Proto && st.Mode == tm.Mode && st.Dst == tm.Dst &&
		(!tm.Src.IsValid() || st.Src == tm.Src) &&
		(tm.Reqid == 0 || st.Reqid == tm.Reqid) && (tm.SPI == 0 || st.SPI == tm.SPI)
}

// PathMTUFunc gives the MTU and device of the route under an SA
// (kernel.RouteMTUAt).
type PathMTUFunc func(src, dst netip.Addr) (mtu, ifindex int, err error)

// HostPathMTU looks routes up in the calling thread's namespace.
func HostPathMTU(src, dst netip.Addr) (int, int, error) {
	return kernel.RouteMTUAt(netns.None(), src, dst)
}

// FillRouteMTU looks up the route MTU under every SA of s. An SA the
// kernel could not send through gets 0 (nothing is forwarded through it):
// without a route to its peer (xfrm_lookup fails), or, packet-offloaded,
// when that route leaves through another device than the SA's
// (xfrm_dev_offload_ok wants the bundle's path device to be the SA's, and
// validate_xmit_xfrm drops a packet sent to another).
func FillRouteMTU(s *Snapshot, lookup PathMTUFunc) {
	if lookup == nil {
		lookup = HostPathMTU
	}
	s.RouteMTU = make(map[Endpoints]int, len(s.States))
	for i := range s.States {
		e := Endpoints{Src: s.States[i].Src, Dst: s.States[i].Dst}
		if _, done := s.RouteMTU[e]; done || s.States[i].Proto != xfrm.ProtoESP {
			continue
		}
		s.RouteMTU[e] = routeMTUFor(&s.States[i], lookup)
	}
}

// routeMTUCheck is how often the mirror re-reads route MTUs, and
// routeMTUBatch how many SA routes one check reads at most: a learnt PMTU
// (or any route MTU change that raised no event the mirror follows) reaches
// the tables within routeMTUCheck * ceil(routes / routeMTUBatch).
const (
	routeMTUCheck = time.Second
	routeMTUBatch = 1024
)

// routeMTUChanged re-reads the next batch of SA routes and says whether
// one MTU differs from what the tables hold.
func (m *Mirror) routeMTUChanged() bool {
	if len(m.routeMTU) == 0 {
		return false
	}
	lookup := m.pathMTU()
	keys := make([]Endpoints, 0, len(m.routeMTU))
	for e := range m.routeMTU {
		keys = append(keys, e)
	}
	slices.SortFunc(keys, func(a, b Endpoints) int {
		if c := a.Dst.Compare(b.Dst); c != 0 {
			return c
		}
		return a.Src.Compare(b.Src)
	})
	if m.mtuNext >= len(keys) {
		m.mtuNext = 0
	}
	end := min(m.mtuNext+routeMTUBatch, len(keys))
	for _, e := range keys[m.mtuNext:end] {
		got := routeMTUFor(m.routeState[e], lookup)
		if got != m.routeMTU[e] {
			m.Log.Info("the route under an SA changed its MTU; recompiling", "src", e.Src, "dst", e.Dst, "was", m.routeMTU[e], "now", got)
			return true
		}
	}
	m.mtuNext = end
	return false
}

// routeMTUFor is the route MTU FillRouteMTU records for st.
func routeMTUFor(st *xfrm.State, lookup PathMTUFunc) int {
	if st == nil {
		return 0
	}
	m, dev, err := lookup(st.Src, st.Dst)
	if err != nil || (st.Offload.Packet() && dev != st.Offload.Ifindex) {
		return 0
	}
	return m
}

// selCovers says whether every packet p selects matches the SA's own
// selector: xfrm_state_find takes an SA for a flow only then
// (xfrm_selector_match on x->sel), and an SA added without one gets a
// match-all selector of its own family, so an IPv6 SA without a selector
// carries no IPv4 (measured in the test VM: XfrmOutNoStates). An SA that
// may refuse some of the policy's packets leaves the policy to the kernel.
func selCovers(st *xfrm.State, p *xfrm.Policy) bool {
	s := st.Sel
	pol6 := p.Sel.Src.Addr().Is6() || p.Sel.Dst.Addr().Is6()
	if !s.Src.IsValid() || !s.Dst.IsValid() {
		return st.Dst.Is6() == pol6
	}
	if s.Src.Addr().Is6() != pol6 || s.Dst.Addr().Is6() != pol6 {
		return false
	}
	covers := func(outer, inner netip.Prefix) bool {
		return outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
	}
	if !covers(s.Src, p.Sel.Src) || !covers(s.Dst, p.Sel.Dst) {
		return false
	}
	if s.Proto != 0 && s.Proto != p.Sel.Proto {
		return false
	}
	portOK := func(sp, sm, pp, pm uint16) bool { return sm == 0 || (pm&sm == sm && pp&sm == sp&sm) }
	return portOK(s.SPort, s.SPortMask, p.Sel.SPort, p.Sel.SPortMask) && portOK(s.DPort, s.DPortMask, p.Sel.DPort, p.Sel.DPortMask)
}

// pathMTU is the mirror's route lookup (see Mirror.PathMTU).
func (m *Mirror) pathMTU() PathMTUFunc {
	if m.PathMTU != nil {
		return m.PathMTU
	}
	if s, ok := m.Src.(interface {
		PathMTU(src, dst netip.Addr) (int, int, error)
	}); ok {
		return s.PathMTU
	}
	return HostPathMTU
}
