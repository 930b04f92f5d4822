// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"net/netip"
	"sort"
	"strings"
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
		if !sel.Matches(labels.Set(me.Labels)) {
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
	sel, _ := metav1.LabelSelectorAsSelector(&o.Spec.Members)
	var members []*v1alpha1.Host
	for i := range hosts {
		if sel.Matches(labels.Set(hosts[i].Labels)) {
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
	window := time.Duration(o.Spec.InitiationWindowSeconds) * time.Second
	for _, m := range ok {
		if m.h.Name == self {
			continue
		}
		if m.vtep.Is4() != mine.vtep.Is4() {
			d.Problems = append(d.Problems, fmt.Sprintf("host %s left out: its VTEP %s is not of this host's family (%s)", m.h.Name, m.vtep, mine.vtep))
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
	gw := netip.Addr{}
	if a, err := netip.ParseAddr(me.Spec.Underlay.Gateway); err == nil {
		gw = a
	}
	d.Doc = hostDoc(o, me, mine.vtep, mine.prefix, gw, d.Peers, l)
	d.Digest = Digest(d.Doc)
	// The engine validates the document as it would a file: a problem
	// here is sluice's bug or an object the CRD let through.
	if _, err := config.ParseHost(d.Doc, OverlayName(o)+".yaml"); err != nil {
		d.Problems = append(d.Problems, "the rendered host document is refused: "+err.Error())
		d.Refused = true
	}
	return d
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

// hostDoc writes the host.yaml of one member. Only values from parsed
// addresses, enums and names matching the CRD patterns go in, each quoted.
func hostDoc(o *v1alpha1.Overlay, me *v1alpha1.Host, vtep netip.Addr, under netip.Prefix, gw netip.Addr, peers []Peer, l Local) []byte {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("# rendered by sluice agent from overlay %s/%s, host %s", o.Namespace, o.Name, me.Name)
	w("name: %q", OverlayName(o))
	iface := me.Spec.Underlay.Interface
	if iface != "" {
		// The uplink is named so the VTEP MTU is computed from its MTU;
		// without mtu:/addresses: the engine leaves it as it is.
		w("uplinks:")
		w("  ports: [%q]", iface)
		if me.Spec.Underlay.MTU > 0 {
			w("  mtu: %d", me.Spec.Underlay.MTU)
		}
	}
	encap := o.Spec.Encapsulation
	if encap == "" {
		encap = config.VTEPVXLAN
	}
	{
		w("vteps:")
		for _, s := range o.Spec.Segments {
			w("  - name: %q", "sl-"+s.Name)
			w("    type: %s", encap)
			w("    vni: %d", s.VNI)
			w("    local: %q", vtep)
			if s.Port != 0 {
				w("    port: %d", s.Port)
			}
			if o.Spec.MTU.Policy == "fixed" && o.Spec.MTU.Value > 0 {
				w("    mtu: %d", o.Spec.MTU.Value)
			}
			if len(peers) > 0 {
				w("    remotes:")
				for _, p := range peers {
					via := p.Underlay
					if !under.Contains(p.Underlay) && gw.IsValid() {
						via = gw
					}
					w("      - {address: %q, via: %q}", p.VTEP, via)
				}
			}
		}
	}
	if len(peers) == 0 {
		return []byte(b.String())
	}
	mode := o.Spec.IPsecMode
	if mode == "" {
		mode = config.ModeTransport
	}
	bits := o.Spec.KeyBits
	if bits == 0 {
		bits = 128
	}
	off := offloadModes[o.Spec.Offload]
	w("ipsec:")
	w("  keying: ike")
	w("  ike:")
	if l.VICI != "" {
		w("    vici: %q", l.VICI)
	}
	w("    ca: %q", l.CA)
	w("    cert: %q", l.Cert)
	w("    private-key: %q", l.PrivKey)
	if o.Spec.Keying.RekeyTime != "" {
		w("    rekey-time: %s", o.Spec.Keying.RekeyTime)
	}
	if o.Spec.Keying.LifeTime != "" {
		w("    life-time: %s", o.Spec.Keying.LifeTime)
	}
	w("  peers:")
	for _, p := range peers {
		w("    - name: %q", p.Name)
		w("      local: %q", vtep)
		w("      remote: %q", p.VTEP)
		w("      mode: %s", mode)
		w("      key-bits: %d", bits)
		w("      offload: %s", off)
		if off != config.OffloadModeNone && iface != "" {
			w("      offload-dev: %q", iface)
		}
		// The certificates carry the host names as subjectAltName DNS.
		w("      local-id: %q", me.Name)
		w("      remote-id: %q", p.Name)
	}
	return []byte(b.String())
}
