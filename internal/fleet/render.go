// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"net/netip"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"sluice/internal/config"
	"sluice/internal/fleet/v1alpha1"
)

// Local is what an agent knows that is not in the API: the paths of its
// IKE credentials (the private key never leaves the host) and charon's
// socket.
type Local struct {
	// Name is this host's Host object name.
	Name              string
	CA, Cert, PrivKey string
	VICI              string
	// LeaveOut are members this host must leave out, by name, with the
	// reason: what the agent found on the host itself (a route to the
	// member's VTEP that sluice did not make). Only those pairs go.
	LeaveOut map[string]string
}

// Peer is one remote member this host tunnels to.
type Peer struct {
	Name     string
	VTEP     netip.Addr
	Underlay netip.Addr
	// Initiator says this host starts IKE with the peer (the pair's
	// lower name does, so a pair negotiates once); Slot is when, after
	// the peer appeared, within the overlay's initiation window.
	Initiator bool
	Slot      time.Duration
}

// Desired is what one host must hold, rendered from the API objects.
type Desired struct {
	// Overlay is the overlay this host is a member of (nil: none).
	Overlay *v1alpha1.Overlay
	// Doc is the host.yaml document the plan/apply engine takes (the same
	// code path as `sluice apply -f host.yaml`); empty without an overlay.
	Doc    []byte
	Digest string
	Peers  []Peer
	// Problems are why something was left out or refused, for status.
	Problems []string
	// LeftOut are the Problems that left a member out of this host's
	// peers (the PeersComplete condition).
	LeftOut []string
	// Refused means this host must not change anything (its own object
	// is in conflict or invalid): the last applied state stays.
	Refused bool
}

// OverlayName is the host.yaml name (and apply journal) of an overlay.
func OverlayName(o *v1alpha1.Overlay) string { return "fleet-" + o.Name }

// older orders objects by creation, then name: the first claim wins.
func older(a, b metav1.ObjectMeta) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// Selects says whether an overlay's member selector makes h a member: its
// labels match and it is not being deleted. A Host with a
// deletionTimestamp (a finalizer holding it) is a member of nothing, so
// no peer keeps a route or a tunnel to a host on its way out.
func Selects(sel labels.Selector, h *v1alpha1.Host) bool {
	return h.DeletionTimestamp == nil && sel.Matches(labels.Set(h.Labels))
}

// Render computes host self's desired state. It never fails: what cannot
// be used is left out and said in Problems.
func Render(self string, overlays []v1alpha1.Overlay, hosts []v1alpha1.Host, l Local) Desired {
	var d Desired
	var me *v1alpha1.Host
	for i := range hosts {
		if hosts[i].Name == self {
			me = &hosts[i]
		}
	}
	if me == nil {
		d.Problems = append(d.Problems, fmt.Sprintf("no Host object named %s: the agent registers it (sluice agent --vtep ... --underlay ...)", self))
		d.Refused = true
		return d
	}
	// The overlay: the oldest that selects this host; others are
	// reported, never merged (two overlays on one host would share lo's
	// VTEP address and the routes).
	sort.Slice(overlays, func(i, j int) bool { return older(overlays[i].ObjectMeta, overlays[j].ObjectMeta) })
	for i := range overlays {
		o := &overlays[i]
		sel, err := metav1.LabelSelectorAsSelector(&o.Spec.Members)
		if err != nil {
			d.Problems = append(d.Problems, fmt.Sprintf("overlay %s: members: %v", o.Name, err))
			continue
		}
		if !Selects(sel, me) {
			continue
		}
		if d.Overlay != nil {
			d.Problems = append(d.Problems, fmt.Sprintf("overlay %s also selects this host: ignored, the host is a member of %s (older); a host is in one overlay", o.Name, d.Overlay.Name))
			continue
		}
		d.Overlay = o
	}
	if d.Overlay == nil {
		return d
	}
	o := d.Overlay
	pool, err := netip.ParsePrefix(o.Spec.VTEPPool)
	if err != nil {
		// The CRD requires a pool; without one no VTEP can be trusted,
		// so this host keeps what it has.
		d.Problems = append(d.Problems, fmt.Sprintf("overlay %s: spec.vtepPool %q is not a network (write 10.99.0.0/24): every member's VTEP must lie in the overlay's pool; nothing applied", o.Name, o.Spec.VTEPPool))
		d.Refused, d.Overlay = true, nil
		return d
	}
	sel, _ := metav1.LabelSelectorAsSelector(&o.Spec.Members)
	var members []*v1alpha1.Host
	for i := range hosts {
		if Selects(sel, &hosts[i]) {
			members = append(members, &hosts[i])
		}
	}
	sort.Slice(members, func(i, j int) bool { return older(members[i].ObjectMeta, members[j].ObjectMeta) })
	// Claims: the first host (oldest) to claim a VTEP or underlay address
	// keeps it; a later claimant is left out by everyone.
	claimed := map[netip.Addr]string{}
	type member struct {
		h          *v1alpha1.Host
		vtep, addr netip.Addr
		prefix     netip.Prefix
	}
	var ok []member
	for _, h := range members {
		why := ""
		vtep, err := netip.ParseAddr(h.Spec.VTEP)
		pfx, perr := netip.ParsePrefix(h.Spec.Underlay.Address)
		switch {
		case err != nil:
			why = fmt.Sprintf("spec.vtep %q: %v", h.Spec.VTEP, err)
		case perr != nil:
			why = fmt.Sprintf("spec.underlay.address %q: %v", h.Spec.Underlay.Address, perr)
		case !pool.Masked().Contains(vtep):
			why = fmt.Sprintf("spec.vtep %s is outside the overlay's vtepPool %s; the administrator gives each Host an address from the pool", vtep, pool.Masked())
		case claimed[vtep] != "":
			why = fmt.Sprintf("spec.vtep %s is already claimed by host %s (registered first); give this host its own VTEP address", vtep, claimed[vtep])
		case claimed[pfx.Addr()] != "":
			why = fmt.Sprintf("spec.underlay.address %s is already claimed by host %s (registered first)", pfx.Addr(), claimed[pfx.Addr()])
		}
		if why != "" {
			if h.Name == self {
				d.Problems = append(d.Problems, "this host is left out of overlay "+o.Name+": "+why)
				d.Refused = true
			} else {
				d.Problems = append(d.Problems, "host "+h.Name+" left out: "+why)
			}
			continue
		}
		claimed[vtep], claimed[pfx.Addr()] = h.Name, h.Name
		ok = append(ok, member{h: h, vtep: vtep, addr: pfx.Addr(), prefix: pfx})
	}
	if d.Refused {
		d.Overlay = nil
		return d
	}
	var mine member
	for _, m := range ok {
		if m.h.Name == self {
			mine = m
		}
	}
	gw := netip.Addr{}
	if a, err := netip.ParseAddr(me.Spec.Underlay.Gateway); err == nil {
		gw = a
	}
	window := time.Duration(o.Spec.InitiationWindowSeconds) * time.Second
	for _, m := range ok {
		if m.h.Name == self {
			continue
		}
		// A peer this host cannot route to would fail the whole apply
		// (and roll it back) on this host: it is left out alone, and
		// the rest of the mesh applies.
		why := unreachable(m.vtep, m.addr, mine.vtep, mine.prefix, gw)
		if why == "" {
			why = l.LeaveOut[m.h.Name]
		}
		if why != "" {
			msg := "host " + m.h.Name + " left out: " + why
			d.Problems = append(d.Problems, msg)
			d.LeftOut = append(d.LeftOut, msg)
			continue
		}
		d.Peers = append(d.Peers, Peer{Name: m.h.Name, VTEP: m.vtep, Underlay: m.addr,
			Initiator: self < m.h.Name, Slot: Slot(self, m.h.Name, window)})
	}
	sort.Slice(d.Peers, func(i, j int) bool { return d.Peers[i].Name < d.Peers[j].Name })
	if len(d.Peers) == 0 {
		// Alone: no document (a VTEP needs remotes); the agent sets
		// nothing up and keeps what is set up.
		return d
	}
	doc, err := hostDoc(o, me, mine.vtep, mine.prefix, gw, d.Peers, l)
	if err != nil {
		d.Problems = append(d.Problems, "the host document cannot be rendered: "+err.Error())
		d.Refused = true
		return d
	}
	d.Doc, d.Digest = doc, Digest(doc)
	// The engine validates the document as it would a file: a problem
	// here is sluice's bug or an object the CRD let through.
	if _, err := config.ParseHost(d.Doc, OverlayName(o)+".yaml"); err != nil {
		d.Problems = append(d.Problems, "the rendered host document is refused: "+err.Error())
		d.Refused = true
	}
	return d
}

// unreachable says why this host cannot reach a peer over its underlay
// ("" : it can): a VTEP of the other family, an underlay address of the
// other family, or an address outside this host's underlay subnet with
// no gateway to send it to (the route to the peer's VTEP would name a
// next hop that is not on the link, and the kernel refuses it).
func unreachable(vtep, addr, myVTEP netip.Addr, mySubnet netip.Prefix, gw netip.Addr) string {
	switch {
	case vtep.Is4() != myVTEP.Is4():
		return fmt.Sprintf("its VTEP %s is not of this host's family (%s)", vtep, myVTEP)
	case addr.Is4() != mySubnet.Addr().Is4():
		return fmt.Sprintf("its underlay address %s is not of this host's underlay family (%s)", addr, mySubnet)
	case !mySubnet.Contains(addr) && !gw.IsValid():
		return fmt.Sprintf("its underlay address %s is outside this host's underlay subnet %s and this host has no spec.underlay.gateway: set one (the next hop to other subnets) or put the hosts in one subnet", addr, mySubnet.Masked())
	}
	return ""
}

// Digest names a desired state: 12 hex digits of the SHA-256 of its
// document. The agent's status and last good state use the same name.
func Digest(doc []byte) string {
	s := sha256.Sum256(doc)
	return hex.EncodeToString(s[:6])
}

// Slot is a pair's fixed initiation delay within window: the same on both
// hosts and spread evenly over the pairs (FNV of the sorted names), so a
// mesh of N hosts does not start N(N-1)/2 negotiations at once
// (OCPBUGS-86429: a libreswan mesh falls over at 75+ nodes).
func Slot(a, b string, window time.Duration) time.Duration {
	if window <= 0 {
		return 0
	}
	if b < a {
		a, b = b, a
	}
	h := fnv.New64a()
	h.Write([]byte(a + "\x00" + b))
	return time.Duration(h.Sum64() % uint64(window))
}

var offloadModes = map[string]string{
	v1alpha1.OffloadRequirePacket: config.OffloadModePacket,
	v1alpha1.OffloadPreferPacket:  config.OffloadModeAuto,
	v1alpha1.OffloadCrypto:        config.OffloadModeCrypto,
	v1alpha1.OffloadNone:          config.OffloadModeNone,
	"":                            config.OffloadModeAuto,
}

// hostDoc writes the host.yaml of one member: it fills config's Host,
// and config.MarshalHost spells the keys (the parser's own declaration)
// and quotes the values, whatever the objects hold.
func hostDoc(o *v1alpha1.Overlay, me *v1alpha1.Host, vtep netip.Addr, under netip.Prefix, gw netip.Addr, peers []Peer, l Local) ([]byte, error) {
	h := &config.Host{Name: OverlayName(o)}
	iface := me.Spec.Underlay.Interface
	if iface != "" {
		// The uplink is named so the VTEP MTU is computed from its MTU;
		// without mtu:/addresses: the engine leaves it as it is.
		h.Uplinks = &config.Uplinks{Ports: []string{iface}, MTU: me.Spec.Underlay.MTU}
	}
	// Encapsulation, IPsec mode and key bits left empty take host.yaml's
	// defaults (vxlan, transport, 128), which are the CRD's too.
	for _, s := range o.Spec.Segments {
		v := config.VTEP{Name: "sl-" + s.Name, Type: o.Spec.Encapsulation, VNI: s.VNI, Local: vtep, Port: s.Port}
		if o.Spec.MTU.Policy == "fixed" && o.Spec.MTU.Value > 0 {
			v.MTU = o.Spec.MTU.Value
		}
		for _, p := range peers {
			via := p.Underlay
			if !under.Contains(p.Underlay) && gw.IsValid() {
				via = gw
			}
			v.Remotes = append(v.Remotes, config.Remote{Address: p.VTEP, Via: via})
		}
		h.VTEPs = append(h.VTEPs, v)
	}
	if len(peers) > 0 {
		ike, err := overlayIKE(o, l)
		if err != nil {
			return nil, err
		}
		h.IPsec = &config.IPsec{Keying: config.KeyingIKE, IKE: ike}
		off := offloadModes[o.Spec.Offload]
		for _, p := range peers {
			// The certificates carry the host names as subjectAltName DNS.
			pr := config.Peer{Name: p.Name, Local: vtep, Remote: p.VTEP, Mode: o.Spec.IPsecMode, KeyBits: o.Spec.KeyBits, Offload: off,
				LocalID: me.Name, RemoteID: p.Name}
			if off != config.OffloadModeNone {
				pr.OffloadDev = iface
			}
			h.IPsec.Peers = append(h.IPsec.Peers, pr)
		}
	}
	doc, err := config.MarshalHost(h)
	if err != nil {
		return nil, err
	}
	head := fmt.Sprintf("# rendered by sluice agent from overlay %s/%s, host %s\n", o.Namespace, o.Name, me.Name)
	return append([]byte(head), doc...), nil
}

// overlayIKE is the ike: section: the agent's credentials and charon
// socket, and the overlay's lifetimes (Go durations, the CRD's pattern).
func overlayIKE(o *v1alpha1.Overlay, l Local) (*config.IKE, error) {
	ike := &config.IKE{VICI: l.VICI, CA: l.CA, Cert: l.Cert, PrivateKey: l.PrivKey}
	for _, lt := range []struct {
		key, val string
		to       *time.Duration
	}{{"spec.keying.rekeyTime", o.Spec.Keying.RekeyTime, &ike.RekeyTime}, {"spec.keying.lifeTime", o.Spec.Keying.LifeTime, &ike.LifeTime}} {
		if lt.val == "" {
			continue
		}
		d, err := time.ParseDuration(lt.val)
		if err != nil {
			return nil, fmt.Errorf("overlay %s: %s %q: write a duration such as 1h or 90m", o.Name, lt.key, lt.val)
		}
		*lt.to = d
	}
	return ike, nil
}
