// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"fmt"
	"net/netip"
	"slices"

	"sluice/internal/config"
	"sluice/internal/kernel"
)

// NewPrune plans the removal of what prev declares and next no longer
// does, for a host whose desired state changes under it (sluice agent: a
// peer left the overlay, a segment was removed). It is a partial teardown:
// only objects apply created (per the journal) go, shared ones next still
// declares (the VTEP address on lo, a VTEP device) stay, and nothing is
// restored or un-journaled beyond the removed objects. The order is
// teardown's: connectivity first (FDB entries, routes, VTEP devices), then
// encryption (IKE connections, SAs, policies), so no packet to a removed
// peer leaves in clear. prev and next must be the same overlay (Name).
func NewPrune(prev, next *config.Host, live *Live, j *Journal) *Plan {
	t := &tearer{h: removed(prev, next), live: live, j: j, has: true, plan: &Plan{File: next.File, Name: next.Name}}
	// Remotes dropped from a VTEP that stays.
	for _, pv := range prev.VTEPs {
		nv := findVTEP(next, pv.Name)
		if nv == nil {
			continue
		}
		for _, r := range pv.Remotes {
			if slices.ContainsFunc(nv.Remotes, remoteAt(r.Address)) {
				continue
			}
			if k := live.link(pv.Name); k != nil && pv.Type == config.VTEPVXLAN && slices.Contains(k.VXLAN.FDB, r.Address) {
				name, dst := pv.Name, r.Address
				t.add(Step{Section: "vteps", Action: "delete", Object: fmt.Sprintf("fdb %s dst %s", name, dst), Why: "the remote left",
					Commands: []string{fmt.Sprintf("bridge fdb del 00:00:00:00:00:00 dev %s dst %s", name, dst)}, run: func(*runner) error {
						if err := kernel.FDBAppend(name, dst, true); err != nil && !kernel.IsNotExist(err) {
							return err
						}
						return nil
					}})
			}
			if r.Via.IsValid() && !nextRoutes(next, r.Address) {
				if cur := live.route(hostPrefix(r.Address)); cur != nil && cur.Via == r.Via {
					t.route(hostPrefix(r.Address), r.Via, pv.Local)
				}
			}
		}
	}
	// Whole VTEPs that went: their devices and routes; the lo address
	// only when no VTEP of next uses it.
	keepLo := map[netip.Addr]bool{}
	for _, v := range next.VTEPs {
		keepLo[v.Local] = true
	}
	var gone []config.VTEP
	for _, v := range t.h.VTEPs {
		if !keepLo[v.Local] {
			gone = append(gone, v)
			continue
		}
		k := live.link(v.Name)
		if k != nil && k.Kind == v.Type && vtepDiff(&v, k) == "" {
			name := v.Name
			if t.ours(kindLink, func(e entry) bool { return e.Link == name }, "VTEP "+name) {
				t.deleteLink("vteps", name, "removed from the desired state")
			}
		}
	}
	keep := t.h.VTEPs
	t.h.VTEPs = gone
	t.vteps()
	t.h.VTEPs = keep
	t.ike()
	t.ikeBlocks() // plan_ike_block.go
	t.ipsec()
	return t.plan
}

// Prune runs a prune plan and saves the journal without the objects it
// removed.
func Prune(plan *Plan, j *Journal) (int, error) {
	n, err := Teardown(plan, j, nil)
	if serr := j.save(); serr != nil && err == nil && n > 0 {
		err = serr
	}
	return n, err
}

// removed is the part of prev that next does not declare: whole VTEPs
// (by name) and IPsec peers (by name; a peer whose settings changed is
// replaced by apply itself).
func removed(prev, next *config.Host) *config.Host {
	h := &config.Host{File: prev.File, Name: prev.Name}
	for _, v := range prev.VTEPs {
		if findVTEP(next, v.Name) == nil {
			h.VTEPs = append(h.VTEPs, v)
		}
	}
	if prev.IPsec != nil {
		ip := *prev.IPsec
		ip.Peers = nil
		for _, p := range prev.IPsec.Peers {
			if next.IPsec == nil || !slices.ContainsFunc(next.IPsec.Peers, func(q config.Peer) bool { return q.Name == p.Name }) {
				ip.Peers = append(ip.Peers, p)
			}
		}
		if len(ip.Peers) > 0 {
			h.IPsec = &ip
		}
	}
	return h
}

func findVTEP(h *config.Host, name string) *config.VTEP {
	for i := range h.VTEPs {
		if h.VTEPs[i].Name == name {
			return &h.VTEPs[i]
		}
	}
	return nil
}

// remoteAt matches a VTEP's remote by address.
func remoteAt(a netip.Addr) func(config.Remote) bool {
	return func(r config.Remote) bool { return r.Address == a }
}

func nextRoutes(h *config.Host, a netip.Addr) bool {
	for _, v := range h.VTEPs {
		if slices.ContainsFunc(v.Remotes, remoteAt(a)) {
			return true
		}
	}
	return false
}
