// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"sluice/internal/config"
	"sluice/internal/kernel"
	"sluice/internal/mtu"
)

// Step is one change to the host: what, why, the equivalent commands an
// operator would type, and the function that makes it through netlink,
// sysfs, devlink or ethtool ioctls.
type Step struct {
	Section  string   `json:"section"` // sriov, uplinks, ipsec, vteps
	Action   string   `json:"action"`  // create, change, replace, delete
	Object   string   `json:"object"`
	Why      string   `json:"why"`
	Commands []string `json:"commands"`
	// IKEPeer names the peer this step initiates IKE with; empty on every
	// other step. Callers (the agent's gate) test it, never Object, which
	// is display text.
	IKEPeer string `json:"ike_peer,omitempty"`
	run     func(r *runner) error
}

// Plan is the ordered steps that make the host match the file.
type Plan struct {
	File  string `json:"file"`
	Name  string `json:"name"`
	Steps []Step `json:"steps"`
	// Notes are decisions and warnings worth reading (offload choices,
	// unencrypted VTEPs).
	Notes []string `json:"notes,omitempty"`
	// Force lets apply install a manual key it installed before (see
	// keyledger.go).
	Force bool `json:"-"`
}

// Empty reports a plan with nothing to do.
func (p *Plan) Empty() bool { return len(p.Steps) == 0 }

// planner builds a plan; errs collects problems that make a plan
// impossible (a missing port, a bond of the wrong mode).
type planner struct {
	h    *config.Host
	keys *config.Keys
	live *Live
	plan *Plan
	errs []string
	// bondName is the file's bond ("" without one); ports are the
	// resolved uplink names.
	bondName string
	ports    []string
	// uplinkMTU is the MTU the uplinks will have (0: unknown).
	uplinkMTU int
	// addrPlanned holds "dev prefix" of addresses already planned: VTEPs
	// with different VNIs may share one local address on lo.
	addrPlanned map[string]bool
	// ikeLast are the IKE initiations, run after the VTEPs' routes exist
	// (plan_ike.go).
	ikeLast []Step
}

func (p *planner) fail(format string, args ...any) {
	p.errs = append(p.errs, fmt.Sprintf(format, args...))
}

func (p *planner) note(format string, args ...any) {
	p.plan.Notes = append(p.plan.Notes, fmt.Sprintf(format, args...))
}

func (p *planner) add(s Step) { p.plan.Steps = append(p.plan.Steps, s) }

// PlanError lists every reason no plan could be made.
type PlanError struct {
	File     string
	Problems []string
}

func (e *PlanError) Error() string {
	return fmt.Sprintf("%s: cannot plan:\n  %s", e.File, strings.Join(e.Problems, "\n  "))
}

// NewPlan compares the file with the live host. keys may be nil when the
// file has no ipsec peers. The order of the steps is the order apply runs
// them in: SR-IOV, uplinks, then encryption (SAs before policies), and only
// then connectivity (VTEP addresses, routes, devices), so that no VTEP
// packet can leave before its policy exists.
func NewPlan(h *config.Host, keys *config.Keys, live *Live) (*Plan, error) {
	p := &planner{h: h, keys: keys, live: live, plan: &Plan{File: h.File, Name: h.Name}}
	p.sriov()
	p.uplinks()
	p.ipsec()
	p.vteps()
	p.plan.Steps = append(p.plan.Steps, p.ikeLast...)
	p.guests()
	if len(p.errs) > 0 {
		return nil, &PlanError{File: h.File, Problems: p.errs}
	}
	return p.plan, nil
}

// ---- uplinks -------------------------------------------------------------

func (p *planner) uplinks() {
	u := p.h.Uplinks
	if u == nil {
		return
	}
	for _, port := range u.Ports {
		name, err := p.live.resolve(port)
		if err != nil {
			p.fail("uplinks.ports: %v", err)
			continue
		}
		if p.live.link(name) == nil {
			p.fail("uplinks.ports: %s: no such interface here (ip link show; check the name, or that the port is in this namespace)", name)
			continue
		}
		p.ports = append(p.ports, name)
	}
	if len(p.errs) > 0 {
		return
	}
	p.uplinkMTU = u.MTU
	dev := ""
	if b := u.Bond; b != nil {
		p.bondName = b.Name
		dev = b.Name
		p.bond(b, u.MTU)
	} else if len(p.ports) == 1 {
		dev = p.ports[0]
		if k := p.live.link(dev); k != nil {
			if u.MTU > 0 && k.MTU != u.MTU {
				p.setMTU("uplinks", dev, k.MTU, u.MTU)
			}
			if p.uplinkMTU == 0 {
				p.uplinkMTU = k.MTU
			}
			if !k.Up {
				p.setUp("uplinks", dev)
			}
		}
	} else {
		for _, port := range p.ports {
			k := p.live.link(port)
			if u.MTU > 0 && k.MTU != u.MTU {
				p.setMTU("uplinks", port, k.MTU, u.MTU)
			}
			if !k.Up {
				p.setUp("uplinks", port)
			}
			if p.uplinkMTU == 0 {
				p.uplinkMTU = k.MTU
			}
		}
	}
	if dev != "" {
		p.addresses("uplinks", dev, u.Addresses)
	}
}

func (p *planner) bond(b *config.Bond, mtu int) {
	k := p.live.link(b.Name)
	primary := ""
	if b.Primary != "" {
		primary, _ = p.live.resolve(b.Primary)
	}
	if k == nil {
		cmd := fmt.Sprintf("ip link add %s type bond mode active-backup miimon %d", b.Name, b.MIIMon)
		if mtu > 0 {
			cmd += fmt.Sprintf(" mtu %d", mtu)
		}
		name, miimon := b.Name, b.MIIMon
		p.add(Step{Section: "uplinks", Action: "create", Object: "bond " + b.Name, Why: "missing",
			Commands: []string{cmd}, run: func(r *runner) error {
				if err := kernel.BondAdd(name, miimon, mtu); err != nil {
					return err
				}
				r.created(entry{Kind: kindLink, Link: name})
				return nil
			}})
	} else {
		if k.Bond == nil {
			p.fail("uplinks.bond.name: %s exists and is a %s, not a bond; delete it (ip link del %s) or choose another name", b.Name, kindName(k.Kind), b.Name)
			return
		}
		if k.Bond.Mode != config.BondModeActiveBackup {
			p.fail("uplinks.bond: %s exists in mode %s; sluice will not change a bond's mode under its ports: delete it (ip link del %s) and apply again", b.Name, k.Bond.Mode, b.Name)
			return
		}
		if k.Bond.MIIMon != b.MIIMon {
			name, miimon := b.Name, b.MIIMon
			old := k.Bond.MIIMon
			p.add(Step{Section: "uplinks", Action: "change", Object: "bond " + b.Name, Why: fmt.Sprintf("miimon %d, want %d", old, miimon),
				Commands: []string{fmt.Sprintf("ip link set %s type bond miimon %d", name, miimon)}, run: func(r *runner) error {
					if err := kernel.BondSet(name, miimon, ""); err != nil {
						return err
					}
					r.changed(entry{Kind: kindMIIMon, Link: name, Old: strconv.Itoa(old), New: strconv.Itoa(miimon)})
					return nil
				}})
		}
		if mtu > 0 && k.MTU != mtu {
			p.setMTU("uplinks", b.Name, k.MTU, mtu)
		}
	}
	bondIdx := 0
	if k != nil {
		bondIdx = k.Index
	}
	for _, port := range p.ports {
		pk := p.live.link(port)
		if k != nil && pk.Master == bondIdx {
			continue
		}
		if pk.Master != 0 {
			p.fail("uplinks.ports: %s is already enslaved to %s; release it first (ip link set %s nomaster)", port, p.live.nameOf(pk.Master), port)
			continue
		}
		port, bondName, wasUp := port, b.Name, pk.Up
		oldMTU := pk.MTU
		p.add(Step{Section: "uplinks", Action: "change", Object: "port " + port, Why: "not in " + bondName,
			Commands: []string{fmt.Sprintf("ip link set %s down", port), fmt.Sprintf("ip link set %s master %s", port, bondName)},
			run: func(r *runner) error {
				if err := kernel.LinkSetMaster(port, bondName); err != nil {
					return err
				}
				r.changed(entry{Kind: kindMaster, Link: port, Old: "", New: bondName, OldUp: wasUp, OldMTU: oldMTU})
				return nil
			}})
	}
	if primary != "" && (k == nil || k.Bond.Primary == 0 || p.live.nameOf(k.Bond.Primary) != primary) {
		name := b.Name
		p.add(Step{Section: "uplinks", Action: "change", Object: "bond " + b.Name, Why: "primary port " + primary,
			Commands: []string{fmt.Sprintf("ip link set %s type bond primary %s", name, primary)}, run: func(*runner) error {
				return kernel.BondSet(name, -1, primary)
			}})
	}
	if k == nil || !k.Up {
		p.setUp("uplinks", b.Name)
	}
	switch {
	case p.uplinkMTU > 0:
	case k != nil:
		p.uplinkMTU = k.MTU
	default:
		// A new bond has the Ethernet default and imposes it on the
		// ports it enslaves (bond_enslave sets each port's MTU to the
		// bond's): plan the VTEP MTU for it now, or the second plan,
		// which sees the bond, would change the VTEP's MTU.
		p.uplinkMTU = ethDefaultMTU
	}
}

// ethDefaultMTU is the MTU the kernel gives a new bond (ether_setup).
const ethDefaultMTU = 1500

func kindName(kind string) string {
	if kind == "" {
		return "physical or driver device"
	}
	return kind + " device"
}

func (p *planner) setMTU(section, dev string, old, mtu int) {
	p.add(Step{Section: section, Action: "change", Object: "link " + dev, Why: fmt.Sprintf("mtu %d, want %d", old, mtu),
		Commands: []string{fmt.Sprintf("ip link set %s mtu %d", dev, mtu)}, run: func(r *runner) error {
			if err := kernel.LinkSetMTU(dev, mtu); err != nil {
				return err
			}
			r.changed(entry{Kind: kindMTU, Link: dev, Old: strconv.Itoa(old), New: strconv.Itoa(mtu)})
			return nil
		}})
}

func (p *planner) setUp(section, dev string) {
	p.add(Step{Section: section, Action: "change", Object: "link " + dev, Why: "down",
		Commands: []string{fmt.Sprintf("ip link set %s up", dev)}, run: func(r *runner) error {
			if err := kernel.LinkSetUp(dev, true); err != nil {
				return err
			}
			r.changed(entry{Kind: kindUp, Link: dev, Old: "down", New: "up"})
			return nil
		}})
}

func (p *planner) addresses(section, dev string, addrs []netip.Prefix) {
	k := p.live.link(dev)
	if p.addrPlanned == nil {
		p.addrPlanned = map[string]bool{}
	}
	for _, a := range addrs {
		if hasAddr(k, a) || p.addrPlanned[dev+" "+a.String()] {
			continue
		}
		p.addrPlanned[dev+" "+a.String()] = true
		a := a
		p.add(Step{Section: section, Action: "create", Object: fmt.Sprintf("address %s on %s", a, dev), Why: "missing",
			Commands: []string{fmt.Sprintf("ip addr add %s dev %s", a, dev)}, run: func(r *runner) error {
				if err := kernel.AddrAdd(dev, a, false); err != nil {
					return err
				}
				r.created(entry{Kind: kindAddr, Link: dev, Prefix: a.String()})
				return nil
			}})
	}
}

// ---- VTEPs ---------------------------------------------------------------

func (p *planner) vteps() {
	if len(p.h.VTEPs) == 0 {
		return
	}
	lo := p.live.link("lo")
	if lo != nil && !lo.Up {
		p.setUp("vteps", "lo")
	}
	for i := range p.h.VTEPs {
		p.vtep(i, &p.h.VTEPs[i])
	}
}

// vtepStack is the MTU stack of a VTEP: its encapsulation over the ESP
// mode of the peer that protects it (none when no peer does).
func (p *planner) vtepStack(v *config.VTEP) (mtu.Stack, *config.Peer) {
	s := mtu.Stack{Encap: mtu.Encap(v.Type), GeneveOptions: v.GeneveOptions, ESP: mtu.ESPNone, OuterIPv6: !v.Local.Is4()}
	peer := p.peerFor(v.Local, v.Remotes)
	if peer != nil {
		s.ESP = mtu.ESPMode(peer.Mode)
		s.Cipher = mtu.Ciphers["aes-gcm-128"]
		if peer.KeyBits == 256 {
			s.Cipher = mtu.Ciphers["aes-gcm-256"]
		}
	}
	return s, peer
}

// peerFor finds the peer whose SAs carry traffic from local to the
// remotes: a transport peer between exactly these addresses, or a tunnel
// peer whose selectors cover them.
func (p *planner) peerFor(local netip.Addr, remotes []config.Remote) *config.Peer {
	if p.h.IPsec == nil || len(remotes) == 0 {
		return nil
	}
	for i := range p.h.IPsec.Peers {
		pr := &p.h.IPsec.Peers[i]
		for _, r := range remotes {
			if covers(pr, local, r.Address) {
				return pr
			}
		}
	}
	return nil
}

func covers(pr *config.Peer, local, remote netip.Addr) bool {
	if pr.Mode == config.ModeTransport || len(pr.Selectors) == 0 {
		return pr.Local == local && pr.Remote == remote
	}
	for _, s := range pr.Selectors {
		if s.Local.Contains(local) && s.Remote.Contains(remote) {
			return true
		}
	}
	return false
}

func hostPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

func (p *planner) vtep(i int, v *config.VTEP) {
	path := fmt.Sprintf("vteps[%d] (%s)", i, v.Name)
	stack, _ := p.vtepStack(v)
	for _, r := range v.Remotes {
		if !covers0(p.h, v.Local, r.Address) {
			p.note("%s: traffic to remote %s is NOT encrypted: no ipsec peer has local %s and remote %s", path, r.Address, v.Local, r.Address)
		}
	}
	// MTU: computed, not guessed.
	mtu := v.MTU
	if p.uplinkMTU > 0 {
		limit := stack.MaxOverlay(p.uplinkMTU, stack.UnderlayLen)
		if limit == 0 {
			p.fail("%s: the uplink MTU %d cannot carry %s at all", path, p.uplinkMTU, stack.Describe())
			return
		}
		if mtu == 0 {
			mtu = limit
			p.note("%s: MTU %d computed for uplink MTU %d: %s", path, mtu, p.uplinkMTU, stack.Arithmetic(mtu))
		} else if mtu > limit {
			p.fail("%s: mtu %d does not fit the uplink MTU %d: %s, and %d > %d; use mtu %d or less, or raise uplinks.mtu to %d (sluice mtu --underlay %d shows every layer)",
				path, mtu, p.uplinkMTU, stack.Arithmetic(mtu), stack.UnderlayLen(mtu), p.uplinkMTU, limit, stack.UnderlayLen(mtu), p.uplinkMTU)
			return
		}
	}
	// The local address on lo, as a host route.
	p.addresses("vteps", "lo", []netip.Prefix{hostPrefix(v.Local)})
	// Routes to the remote VTEPs, with the VTEP address as source so the
	// packets match the SA selectors. sluice adds them (proto 115) and
	// replaces only its own: a remote whose address this host already
	// routes some other way (a storage VIP, a DNS server) is refused,
	// never taken over (remoteRoute).
	for _, r := range v.Remotes {
		if !r.Via.IsValid() {
			continue
		}
		dst, via, src := hostPrefix(r.Address), r.Via, v.Local
		cur := p.live.route(dst)
		if cur != nil && cur.Via == via && cur.Src == src {
			continue
		}
		if cur != nil && !SluiceMadeRoute(cur, src) {
			dev := p.live.nameOf(cur.Dev)
			if dev == "" {
				dev = "-"
			}
			p.fail("%s: remote %s: this host already has the route %s via %s dev %s (proto %d), which sluice did not create; sluice adds a route to a remote VTEP and never replaces one it did not make. "+
				"Remove that route if it is stale (ip route del %s), or give the remote a VTEP this host does not route elsewhere",
				path, r.Address, dst, orNone(cur.Via), dev, cur.Proto, dst)
			continue
		}
		why := "missing"
		var old *entry
		cmd := fmt.Sprintf("ip route add %s via %s src %s proto %d", dst, via, src, kernel.RouteProtoSluice)
		set := kernel.RouteAddSluice
		if cur != nil {
			why = fmt.Sprintf("via %s src %s, want via %s src %s", orNone(cur.Via), orNone(cur.Src), via, src)
			old = &entry{Kind: kindRoute, Prefix: dst.String(), Via: addrStr(cur.Via), Src: addrStr(cur.Src), Link: p.live.nameOf(cur.Dev)}
			cmd = fmt.Sprintf("ip route replace %s via %s src %s proto %d", dst, via, src, kernel.RouteProtoSluice)
			set = kernel.RouteReplaceSluice
		}
		p.add(Step{Section: "vteps", Action: map[bool]string{true: "create", false: "replace"}[cur == nil], Object: "route " + dst.String(), Why: why,
			Commands: []string{cmd}, run: func(r *runner) error {
				if err := set(dst, via, src); err != nil {
					return err
				}
				e := entry{Kind: kindRoute, Prefix: dst.String(), Via: via.String(), Src: src.String()}
				if old != nil {
					r.changed(entry{Kind: kindRoute, Prefix: dst.String(), Via: via.String(), Src: src.String(), Old: old.Via + " " + old.Src + " " + old.Link})
				} else {
					r.created(e)
				}
				return nil
			}})
	}
	if ovsOwned(p.h, v.Name) {
		return // Open vSwitch's tunnel ports carry it (plan_guests.go)
	}
	p.vtepDevice(path, v, mtu)
	p.addresses("vteps", v.Name, v.Addresses)
	if k := p.live.link(v.Name); k == nil || p.vtepRecreated(v.Name) {
		p.setUpNoJournal("vteps", v.Name, "created down")
	} else if !k.Up {
		p.setUpNoJournal("vteps", v.Name, "down")
	}
}

// SluiceMadeRoute says whether a route to a remote VTEP is sluice's: it
// carries sluice's protocol number, or (made by a sluice from before the
// number) its preferred source is this VTEP's own address, which nothing
// but the overlay uses as a source. The fleet agent leaves out a peer
// whose VTEP has a route that is not (internal/agent/routeclash.go).
func SluiceMadeRoute(r *kernel.Route, vtep netip.Addr) bool {
	return r.Proto == kernel.RouteProtoSluice || (r.Src.IsValid() && r.Src == vtep)
}

func covers0(h *config.Host, local, remote netip.Addr) bool {
	if h.IPsec == nil {
		return false
	}
	for i := range h.IPsec.Peers {
		if covers(&h.IPsec.Peers[i], local, remote) {
			return true
		}
	}
	return false
}

func orNone(a netip.Addr) string {
	if !a.IsValid() {
		return "none"
	}
	return a.String()
}

func addrStr(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// vtepRecreated reports whether this plan creates or replaces the device.
func (p *planner) vtepRecreated(name string) bool {
	for _, s := range p.plan.Steps {
		if s.Object == "vtep "+name && (s.Action == "create" || s.Action == "replace") {
			return true
		}
	}
	return false
}

// setUpNoJournal brings up a device the file owns (its state needs no
// restoring: teardown deletes it).
func (p *planner) setUpNoJournal(section, dev, why string) {
	p.add(Step{Section: section, Action: "change", Object: "link " + dev, Why: why,
		Commands: []string{fmt.Sprintf("ip link set %s up", dev)}, run: func(*runner) error { return kernel.LinkSetUp(dev, true) }})
}

func (p *planner) vtepDevice(path string, v *config.VTEP, mtu int) {
	k := p.live.link(v.Name)
	single := netip.Addr{}
	if len(v.Remotes) == 1 {
		single = v.Remotes[0].Address
	}
	var createCmd string
	var create func() error
	switch v.Type {
	case config.VTEPGeneve:
		createCmd = fmt.Sprintf("ip link add %s type geneve id %d remote %s dstport %d", v.Name, v.VNI, single, v.Port)
		name, vni, port := v.Name, v.VNI, v.Port
		create = func() error { return kernel.GeneveAdd(name, vni, single, port, mtu) }
	default:
		createCmd = fmt.Sprintf("ip link add %s type vxlan id %d local %s", v.Name, v.VNI, v.Local)
		if single.IsValid() {
			createCmd += " remote " + single.String()
		}
		createCmd += fmt.Sprintf(" dstport %d", v.Port)
		name, vni, local, port := v.Name, v.VNI, v.Local, v.Port
		create = func() error { return kernel.VXLANAdd(name, vni, local, single, port, mtu) }
	}
	if mtu > 0 {
		createCmd += fmt.Sprintf(" mtu %d", mtu)
	}
	var fdbCmds []string
	var fdb []netip.Addr
	if v.Type == config.VTEPVXLAN && len(v.Remotes) > 1 {
		for _, r := range v.Remotes {
			fdb = append(fdb, r.Address)
			fdbCmds = append(fdbCmds, fmt.Sprintf("bridge fdb append 00:00:00:00:00:00 dev %s dst %s", v.Name, r.Address))
		}
	}
	name := v.Name
	createStep := func(action, why string, pre []string, del bool) {
		p.add(Step{Section: "vteps", Action: action, Object: "vtep " + name, Why: why,
			Commands: append(append(pre, createCmd), fdbCmds...), run: func(r *runner) error {
				if del {
					if err := kernel.LinkDelete(name); err != nil {
						return err
					}
				}
				if err := create(); err != nil {
					return err
				}
				r.created(entry{Kind: kindLink, Link: name})
				for _, d := range fdb {
					if err := kernel.FDBAppend(name, d, false); err != nil {
						return err
					}
				}
				return nil
			}})
	}
	if k == nil {
		createStep("create", "missing", nil, false)
		return
	}
	if diff := vtepDiff(v, k); diff != "" {
		if k.Kind != v.Type {
			p.fail("%s: %s exists and is a %s; delete it (ip link del %s) or choose another name", path, v.Name, kindName(k.Kind), v.Name)
			return
		}
		createStep("replace", diff, []string{"ip link del " + v.Name}, true)
		return
	}
	if mtu > 0 && k.MTU != mtu {
		p.setMTUOwned("vteps", v.Name, k.MTU, mtu)
	}
	if v.Type == config.VTEPVXLAN && len(v.Remotes) > 1 {
		for _, r := range v.Remotes {
			if slices.Contains(k.VXLAN.FDB, r.Address) {
				continue
			}
			dst := r.Address
			p.add(Step{Section: "vteps", Action: "create", Object: fmt.Sprintf("fdb %s dst %s", name, dst), Why: "missing",
				Commands: []string{fmt.Sprintf("bridge fdb append 00:00:00:00:00:00 dev %s dst %s", name, dst)}, run: func(*runner) error {
					return kernel.FDBAppend(name, dst, false)
				}})
		}
	}
}

func (p *planner) setMTUOwned(section, dev string, old, mtu int) {
	p.add(Step{Section: section, Action: "change", Object: "link " + dev, Why: fmt.Sprintf("mtu %d, want %d", old, mtu),
		Commands: []string{fmt.Sprintf("ip link set %s mtu %d", dev, mtu)}, run: func(*runner) error { return kernel.LinkSetMTU(dev, mtu) }})
}

// vtepDiff says how the live device differs in what cannot be changed in
// place ("" when it matches).
func vtepDiff(v *config.VTEP, k *kernel.LinkConfig) string {
	var d []string
	switch {
	case k.Kind != v.Type:
		return fmt.Sprintf("is a %s, want %s", kindName(k.Kind), v.Type)
	case v.Type == config.VTEPVXLAN && k.VXLAN != nil:
		x := k.VXLAN
		if x.VNI != v.VNI {
			d = append(d, fmt.Sprintf("vni %d, want %d", x.VNI, v.VNI))
		}
		if x.Local != v.Local {
			d = append(d, fmt.Sprintf("local %s, want %s", orNone(x.Local), v.Local))
		}
		if x.Port != v.Port {
			d = append(d, fmt.Sprintf("dstport %d, want %d", x.Port, v.Port))
		}
		want := netip.Addr{}
		if len(v.Remotes) == 1 {
			want = v.Remotes[0].Address
		}
		if x.Remote != want {
			d = append(d, fmt.Sprintf("remote %s, want %s", orNone(x.Remote), orNone(want)))
		}
	case v.Type == config.VTEPGeneve && k.Geneve != nil:
		g := k.Geneve
		if g.VNI != v.VNI {
			d = append(d, fmt.Sprintf("vni %d, want %d", g.VNI, v.VNI))
		}
		if g.Port != v.Port {
			d = append(d, fmt.Sprintf("dstport %d, want %d", g.Port, v.Port))
		}
		if len(v.Remotes) == 1 && g.Remote != v.Remotes[0].Address {
			d = append(d, fmt.Sprintf("remote %s, want %s", orNone(g.Remote), v.Remotes[0].Address))
		}
	}
	return strings.Join(d, ", ")
}
