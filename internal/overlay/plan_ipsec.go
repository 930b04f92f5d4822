// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"fmt"
	"net/netip"
	"strings"

	"sluice/internal/config"
	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// AEAD is the one ESP transform sluice installs: AES-GCM as in RFC 4106,
// with a 128-bit ICV. Its key is the AES key followed by a 4-byte salt.
const (
	AEAD    = "rfc4106(gcm(aes))"
	ICVBits = 128
)

// wantSA is one SA the file asks for.
type wantSA struct {
	peer     *config.Peer
	dir      string // out or in
	src, dst netip.Addr
	spi      uint32
	reqid    uint32
	key      config.Key
	offload  string // none, crypto, packet, auto (after the bond gate)
	// dev is the device the SA is offloaded to: offload-dev, or for
	// packet offload to a bond, the bond's active port (plan_bond_packet.go).
	dev string
	// oseq and seq start the sequence numbers of an SA that replaces one
	// with the same key (carried, so the key ledger lets it through).
	oseq, seq uint64
	carried   bool
}

func (w wantSA) String() string {
	return fmt.Sprintf("SA %s %s->%s spi %#x", w.dir, w.src, w.dst, w.spi)
}

// offloadOf names a live SA's offload mode.
func offloadOf(o *xfrm.Offload) string {
	switch {
	case o == nil:
		return config.OffloadModeNone
	case o.Packet():
		return config.OffloadModePacket
	}
	return config.OffloadModeCrypto
}

// offloadKey names the file's setting that chose dir's mode: "offload"
// (the shorthand), or offload-out/offload-in when they differ.
func offloadKey(pr *config.Peer, dir string) string {
	if pr.OffloadOut == pr.OffloadIn {
		return "offload"
	}
	return "offload-" + dir
}

// bondOffloadBroken: see kernel.BondOffloadBroken.
func bondOffloadBroken(release string) bool { return kernel.BondOffloadBroken(release) }

// isBond reports whether dev is (or will be) a bond.
func (p *planner) isBond(dev string) bool {
	if dev == p.bondName && dev != "" {
		return true
	}
	k := p.live.link(dev)
	return k != nil && k.Kind == "bond"
}

func (p *planner) ipsec() {
	s := p.h.IPsec
	if s == nil || len(s.Peers) == 0 {
		return
	}
	if p.keys == nil && p.h.HasKeying(config.KeyingManual) {
		p.fail("ipsec: no key file loaded")
		return
	}
	for i := range s.Peers {
		pr := &s.Peers[i]
		path := fmt.Sprintf("ipsec.peers[%d] (%s)", i, pr.Name)
		if pr.Keying == config.KeyingIKE {
			p.ikePeer(path, pr) // plan_ike.go
			continue
		}
		p.manualKeyNote(path)
		out, in, err := p.keys.PeerKeys(pr.Name, pr.KeyBits)
		if err != nil {
			p.fail("%s: %v", path, err)
			continue
		}
		// Each direction has its own mode (offload-out/offload-in, the
		// ixgbevf VF-offload patches): the bond gate and auto's fallback apply per direction.
		modes := map[string]string{"out": pr.OffloadFor("out"), "in": pr.OffloadFor("in")}
		if pr.Offloads() {
			if p.live.link(pr.OffloadDev) == nil && pr.OffloadDev != p.bondName {
				p.fail("%s: offload-dev %s: no such interface (and the file does not create it)", path, pr.OffloadDev)
				continue
			}
			refused := false
			for _, dir := range []string{"out", "in"} {
				mode := modes[dir]
				if mode == config.OffloadModeNone {
					continue
				}
				what := offloadKey(pr, dir)
				if mode == config.OffloadModePacket && p.isBond(pr.OffloadDev) {
					continue // to the active port, never through the bond's xfrmdev_ops: plan_bond_packet.go
				}
				if p.isBond(pr.OffloadDev) && bondOffloadBroken(p.live.Release) && !s.UnsafeBondOffload {
					why := fmt.Sprintf("ESP offload through bond %s is broken on Linux %s: the bonding driver hands the port's driver the bond instead of the port (xso.real_dev is set only after xdo_dev_state_add), so the SA is not programmed into the NIC and the next failover can oops (verified on 6.12.95 with netdevsim; mlx5 reads the same field)", pr.OffloadDev, p.live.Release)
					if mode == config.OffloadModeAuto {
						p.note("%s: %s auto -> none: %s", path, what, why)
						modes[dir] = config.OffloadModeNone
					} else {
						p.fail("%s: %s %s refused: %s. Use offload: none; or offload-dev: <port>, knowing the SAs stay on that port at a failover (plan explains); or set ipsec.unsafe-bond-offload: true if your kernel has the fix", path, what, mode, why)
						refused = true
					}
					continue
				}
				if mode == config.OffloadModeAuto && (what != "offload" || dir == "out") {
					p.note("%s: %s auto on %s: apply tries packet, then crypto, then none for the %s SA, and reports which it got", path, what, pr.OffloadDev, dir)
				}
			}
			if refused {
				continue
			}
			p.bondPortOffload(path, pr, modes)
			p.bondPacketNote(path, pr, modes)
		}
		if !p.driverQuirks(path, pr, modes, true) { // plan_driverquirk.go
			continue
		}
		sas := []wantSA{
			{peer: pr, dir: "out", src: pr.Local, dst: pr.Remote, spi: pr.SPIOut, reqid: pr.ReqidOut, key: out, offload: modes["out"]},
			{peer: pr, dir: "in", src: pr.Remote, dst: pr.Local, spi: pr.SPIIn, reqid: pr.ReqidIn, key: in, offload: modes["in"]},
		}
		for i := range sas {
			sas[i].dev = p.offloadDevFor(pr, sas[i].offload)
		}
		for _, w := range sas {
			p.sa(w)
		}
		for _, w := range sas {
			p.policies(w)
		}
		if (throughBond(modes["out"]) || throughBond(modes["in"])) && p.isBond(pr.OffloadDev) {
			p.bondESPFeatures(pr.OffloadDev)
		}
	}
	p.saBudget()
}

// bondESPFeatures turns the bond's ESP offload features on (the ConnectX-6 SR-IOV guide:
// ethtool --offload bond0 esp-hw-offload on esp-tx-csum-hw-offload on).
// It is planned before the SAs' steps would need it... and runs after the
// bond exists, so it is inserted before the first SA step.
func (p *planner) bondESPFeatures(bond string) {
	fs := p.live.Features[bond]
	var want []string
	for _, f := range []string{"esp-hw-offload", "esp-tx-csum-hw-offload"} {
		cur, ok := fs[f]
		if ok && cur.Active {
			continue
		}
		if ok && !cur.Available {
			continue // fixed off: the ports cannot; the SA add will say so
		}
		want = append(want, f)
	}
	if len(want) == 0 {
		return
	}
	set := map[string]bool{}
	for _, f := range want {
		set[f] = true
	}
	step := Step{Section: "ipsec", Action: "change", Object: "features of " + bond, Why: strings.Join(want, ", ") + " off",
		Commands: []string{fmt.Sprintf("ethtool -K %s %s", bond, strings.Join(onAll(want), " "))}, run: func(r *runner) error {
			if err := kernel.EthtoolSetFeatures(bond, set); err != nil {
				return err
			}
			for _, f := range want {
				r.changed(entry{Kind: kindFeature, Link: bond, Name: f, Old: "off", New: "on"})
			}
			return nil
		}}
	// Before the first ipsec step.
	for i, s := range p.plan.Steps {
		if s.Section == "ipsec" {
			p.plan.Steps = append(p.plan.Steps[:i], append([]Step{step}, p.plan.Steps[i:]...)...)
			return
		}
	}
	p.add(step)
}

func onAll(fs []string) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f + " on"
	}
	return out
}

// saCommand is `ip xfrm state add` for w with mode m (none, crypto,
// packet), the key redacted.
func saCommand(w wantSA, m string) string {
	pr := w.peer
	c := fmt.Sprintf("ip xfrm state add src %s dst %s proto esp spi %#x reqid %d mode %s replay-window %d", w.src, w.dst, w.spi, w.reqid, pr.Mode, pr.ReplayWindow)
	if pr.ESN {
		c += " flag esn"
	}
	c += fmt.Sprintf(" aead '%s' %s %d", AEAD, config.Redacted, ICVBits)
	if m == config.OffloadModeCrypto || m == config.OffloadModePacket {
		c += " offload"
		if m == config.OffloadModePacket {
			c += " packet"
		}
		c += fmt.Sprintf(" dev %s dir %s", w.dev, w.dir)
	}
	return c
}

// saDiff says how a live SA differs from w ("" when it matches).
func (p *planner) saDiff(w wantSA, l *xfrm.StateDetail) string {
	pr := w.peer
	var d []string
	if l.Src != w.src {
		d = append(d, fmt.Sprintf("src %s, want %s", l.Src, w.src))
	}
	wantMode := uint8(0)
	if pr.Mode == config.ModeTunnel {
		wantMode = 1
	}
	if l.Mode != wantMode {
		d = append(d, fmt.Sprintf("mode %d, want %s", l.Mode, pr.Mode))
	}
	if l.Reqid != w.reqid {
		d = append(d, fmt.Sprintf("reqid %d, want %d", l.Reqid, w.reqid))
	}
	if l.Alg.AEAD != AEAD || l.Alg.ICVBits != ICVBits {
		d = append(d, fmt.Sprintf("algorithm %q/%d, want %s/%d", l.Alg.AEAD, l.Alg.ICVBits, AEAD, ICVBits))
	} else if int(l.KeyBits) != pr.KeyBits+32 {
		d = append(d, fmt.Sprintf("%d-bit key, want %d", l.KeyBits-32, pr.KeyBits))
	} else if l.KeyDigest != xfrm.KeyDigest(w.key.Bytes()) {
		d = append(d, "a different key")
	}
	if l.Alg.ESN != pr.ESN {
		d = append(d, fmt.Sprintf("esn %v, want %v", l.Alg.ESN, pr.ESN))
	}
	if int(l.ReplayWindow) != pr.ReplayWindow {
		d = append(d, fmt.Sprintf("replay window %d, want %d", l.ReplayWindow, pr.ReplayWindow))
	}
	got := offloadOf(l.Offload)
	switch {
	case w.offload == config.OffloadModeAuto:
		// Any mode auto could have obtained, on the right device.
	case got != w.offload:
		d = append(d, fmt.Sprintf("offload %s, want %s", got, w.offload))
	}
	if got != config.OffloadModeNone && p.live.nameOf(l.Offload.Ifindex) != w.dev && w.offload != config.OffloadModeNone {
		d = append(d, fmt.Sprintf("offload device %s, want %s%s", p.live.nameOf(l.Offload.Ifindex), w.dev, p.activeOf(pr, w)))
	}
	if got != config.OffloadModeNone && l.Offload.Inbound() != (w.dir == "in") {
		d = append(d, "offload direction")
	}
	return strings.Join(d, ", ")
}

func (p *planner) sa(w wantSA) {
	l := p.live.sa(w.dst, w.spi)
	action, why := "create", "missing"
	if l != nil {
		diff := p.saDiff(w, l)
		if diff == "" {
			return
		}
		action, why = "replace", diff
		if !p.seqRestartCheck(w, l.KeyDigest == xfrm.KeyDigest(w.key.Bytes())) { // plan_driverquirk.go
			return
		}
	}
	var cmds []string
	if l != nil {
		cmds = append(cmds, fmt.Sprintf("ip xfrm state delete src %s dst %s proto esp spi %#x", l.Src, w.dst, w.spi))
	}
	switch w.offload {
	case config.OffloadModeAuto:
		for _, m := range []string{config.OffloadModePacket, config.OffloadModeCrypto, config.OffloadModeNone} {
			cmds = append(cmds, saCommand(w, m)+"   # auto: try "+m)
		}
	default:
		cmds = append(cmds, saCommand(w, w.offload))
	}
	replace := l != nil
	p.add(Step{Section: "ipsec", Action: action, Object: w.String(), Why: why, Commands: cmds, run: func(r *runner) error {
		w := w
		if replace {
			if err := carrySeq(&w); err != nil {
				return err
			}
			if err := xfrm.StateDelete(w.dst, w.spi); err != nil && !kernel.IsNotExist(err) {
				return err
			}
		}
		return r.addSA(w)
	}})
}

// policySpecs are the policies one SA direction needs: out (transport or
// tunnel), or in (+ fwd in tunnel mode).
func policySpecs(w wantSA) []xfrm.ESPPolicy {
	pr := w.peer
	var out []xfrm.ESPPolicy
	sels := [][2]netip.Prefix{{hostPrefix(pr.Local), hostPrefix(pr.Remote)}}
	if pr.Mode == config.ModeTunnel && len(pr.Selectors) > 0 {
		sels = nil
		for _, s := range pr.Selectors {
			sels = append(sels, [2]netip.Prefix{s.Local, s.Remote})
		}
	}
	tunnel := pr.Mode == config.ModeTunnel
	for _, s := range sels {
		base := xfrm.ESPPolicy{Priority: pr.Priority, Reqid: w.reqid, Tunnel: tunnel}
		if tunnel {
			base.TmplSrc, base.TmplDst = w.src, w.dst
		}
		if w.dir == "out" {
			b := base
			b.Dir, b.Src, b.Dst = xfrm.DirOut, s[0], s[1]
			out = append(out, b)
			continue
		}
		b := base
		b.Dir, b.Src, b.Dst = xfrm.DirIn, s[1], s[0]
		out = append(out, b)
		if tunnel {
			f := b
			f.Dir = xfrm.DirFwd
			out = append(out, f)
		}
	}
	return out
}

func policyCommand(pol xfrm.ESPPolicy, verb, dev string, packet bool) string {
	c := fmt.Sprintf("ip xfrm policy %s src %s dst %s dir %s", verb, pol.Src, pol.Dst, pol.Dir)
	if pol.Priority != 0 {
		c += fmt.Sprintf(" priority %d", pol.Priority)
	}
	c += " tmpl"
	if pol.Tunnel {
		c += fmt.Sprintf(" src %s dst %s", pol.TmplSrc, pol.TmplDst)
	}
	mode := "transport"
	if pol.Tunnel {
		mode = "tunnel"
	}
	c += fmt.Sprintf(" proto esp reqid %d mode %s", pol.Reqid, mode)
	if packet {
		c += " offload packet dev " + dev
	}
	return c
}

// policyDiff says how a live policy differs ("" when it matches);
// wantPacket is whether it must be packet-offloaded on dev.
func (p *planner) policyDiff(pol xfrm.ESPPolicy, l *xfrm.Policy, wantPacket bool, dev string) string {
	var d []string
	if l.Action != xfrm.ActionAllow {
		d = append(d, "action block")
	}
	if l.Priority != pol.Priority {
		d = append(d, fmt.Sprintf("priority %d, want %d", l.Priority, pol.Priority))
	}
	if len(l.Tmpls) != 1 {
		d = append(d, fmt.Sprintf("%d templates, want 1", len(l.Tmpls)))
	} else {
		t := l.Tmpls[0]
		mode := uint8(0)
		if pol.Tunnel {
			mode = 1
		}
		if t.Proto != protoESP || t.Reqid != pol.Reqid || t.Mode != mode || t.Optional {
			d = append(d, fmt.Sprintf("template proto %d reqid %d mode %d, want esp reqid %d mode %d", t.Proto, t.Reqid, t.Mode, pol.Reqid, mode))
		}
		if pol.Tunnel && (t.Src != pol.TmplSrc || t.Dst != pol.TmplDst) {
			d = append(d, fmt.Sprintf("tunnel %s->%s, want %s->%s", orNone(t.Src), orNone(t.Dst), pol.TmplSrc, pol.TmplDst))
		}
	}
	if got := l.Offload.Packet(); got != wantPacket {
		d = append(d, fmt.Sprintf("packet offload %v, want %v", got, wantPacket))
	} else if got && p.live.nameOf(l.Offload.Ifindex) != dev {
		d = append(d, fmt.Sprintf("offload device %s, want %s", p.live.nameOf(l.Offload.Ifindex), dev))
	}
	return strings.Join(d, ", ")
}

func (p *planner) policies(w wantSA) {
	liveSA := p.live.sa(w.dst, w.spi)
	saChanges := liveSA == nil || p.saDiff(w, liveSA) != ""
	for _, pol := range policySpecs(w) {
		pol := pol
		// Packet offload covers the policies too (never FWD). For auto
		// the SA decides, at apply time when it is (re)installed.
		wantPacket := w.offload == config.OffloadModePacket
		if w.offload == config.OffloadModeAuto && !saChanges {
			wantPacket = liveSA.Offload.Packet()
		}
		if pol.Dir == xfrm.DirFwd {
			wantPacket = false
		}
		l := p.live.policy(pol.Dir, pol.Src, pol.Dst)
		if l != nil && !(w.offload == config.OffloadModeAuto && saChanges && pol.Dir != xfrm.DirFwd) {
			if p.policyDiff(pol, l, wantPacket, w.dev) == "" {
				continue
			}
		}
		action, why, verb := "create", "missing", "add"
		if l != nil {
			action, verb = "replace", "update"
			why = p.policyDiff(pol, l, wantPacket, w.dev)
			if why == "" {
				why = "its SA is reinstalled with offload auto"
			}
		}
		cmd := policyCommand(pol, verb, w.dev, wantPacket)
		if w.offload == config.OffloadModeAuto && pol.Dir != xfrm.DirFwd {
			cmd += "   # offload packet only if the SA got packet offload"
		}
		update := l != nil
		p.add(Step{Section: "ipsec", Action: action, Object: fmt.Sprintf("policy %s %s->%s", pol.Dir, pol.Src, pol.Dst), Why: why,
			Commands: []string{cmd}, run: func(r *runner) error {
				return r.addPolicy(w, pol, update)
			}})
	}
}
