// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
)

func (m *hostMeta) applyDefaults(p *parser, h *Host) {
	if !p.Given["name"] {
		base := filepath.Base(h.File)
		h.Name = strings.TrimSuffix(base, filepath.Ext(base))
		if !nameRE.MatchString(h.Name) {
			h.Name = "host"
		}
	}
	for i, it := range m.sriov {
		for j, vi := range p.ItemsOf(it.Path+".vf", len(h.SRIOV[i].VF)) {
			if !p.Given[vi.Path+".index"] {
				h.SRIOV[i].VF[j].Index = -1
			}
		}
	}
	for i, it := range m.vteps {
		v := &h.VTEPs[i]
		if !p.Given[it.Path+".port"] {
			v.Port = DefaultVXLANPort
			if v.Type == VTEPGeneve {
				v.Port = DefaultGenevePort
			}
		}
	}
	m.applyIKEDefaults(p, h)
	for i, it := range m.peers {
		pr := &h.IPsec.Peers[i]
		// offload is the shorthand; offload-out/offload-in override it.
		if !p.Given[it.Path+".offload-out"] {
			pr.OffloadOut = pr.Offload
		}
		if !p.Given[it.Path+".offload-in"] {
			pr.OffloadIn = pr.Offload
		}
		// Packet offload turns ESN on unless the file says: mlx5 (the
		// packet-offload driver sluice knows, internal/driverquirk) keeps
		// a replay window only for ESN SAs and starts a non-ESN SA at
		// sequence 1 whatever oseq says, so a non-ESN SA moved to another
		// port (a bond failover) repeats AES-GCM nonces and the peer
		// drops it. ESN changes the wire format: the far end needs
		// esn: true too (plan says so, docs/overlay.md).
		if !p.Given[it.Path+".esn"] && (pr.OffloadOut == OffloadModePacket || pr.OffloadIn == OffloadModePacket) {
			pr.ESN, pr.ESNByOffload = true, true
		}
		if !p.Given[it.Path+".replay-window"] {
			pr.ReplayWindow = MaxLegacyReplay
			if pr.ESN {
				pr.ReplayWindow = DefaultReplayWindow
			}
		}
		if !p.Given[it.Path+".reqid-out"] {
			pr.ReqidOut = pr.SPIOut
		}
		if !p.Given[it.Path+".reqid-in"] {
			pr.ReqidIn = pr.SPIIn
		}
	}
	m.guests.applyDefaults(p, h)
}

func (m *hostMeta) validate(p *parser, h *Host) {
	if h.Uplinks == nil && len(h.SRIOV) == 0 && len(h.VTEPs) == 0 && h.IPsec == nil && len(h.GuestNetworks) == 0 && len(p.Errs) == 0 {
		p.Errorf(m.rootLine, "", "nothing to set up; write at least one of uplinks:, sriov:, vteps: or ipsec: (see docs/overlay.md)")
	}
	names := map[string]string{} // device name -> path that declares it
	claim := func(name, path string, line int, what string) {
		if name == "" {
			return
		}
		if first, dup := names[name]; dup {
			p.Errorf(line, path, "%s is already used by %s; give the %s another name", show(name), first, what)
			return
		}
		names[name] = path
	}
	if u := h.Uplinks; u != nil {
		m.validateUplinks(p, u, claim)
	}
	m.validateSRIOV(p, h)
	for i := range h.VTEPs {
		m.validateVTEP(p, h, i, claim)
	}
	if h.IPsec != nil {
		m.validateIPsec(p, h)
	}
	m.guests.validate(p, h, claim)
}

func (m *hostMeta) validateUplinks(p *parser, u *Uplinks, claim func(string, string, int, string)) {
	it := m.uplinks
	if len(u.Ports) == 0 && !p.Bad[m.uplinks.Path+".ports"] {
		p.ErrAt(it, "ports", "missing or empty; list the physical ports, such as ports: [enp3s0f0np0, enp3s0f1np1]")
	}
	for i, port := range u.Ports {
		path := fmt.Sprintf("%s.ports[%d]", m.uplinks.Path, i)
		if len(u.Ports) == 1 {
			path = m.uplinks.Path + ".ports"
		}
		claim(port, path, m.portLines[i], "port")
	}
	if b := u.Bond; b != nil {
		if b.Name == "" {
			p.Missing(m.bond, "name", "name the bond device, such as name: bond0")
		}
		l, path := p.At(m.bond, "name")
		claim(b.Name, path, l, "bond")
		if b.Primary != "" && !slices.Contains(u.Ports, b.Primary) {
			p.ErrAt(m.bond, "primary", "%s is not one of uplinks.ports (%s); name one of them or remove primary", show(b.Primary), strings.Join(u.Ports, ", "))
		}
	} else if len(u.Addresses) > 0 && len(u.Ports) > 1 {
		p.ErrAt(it, "addresses", "with %d ports and no bond the addresses have no single device; add bond: {name: bond0}, or keep one port", len(u.Ports))
	}
	seen := map[netip.Addr]int{}
	for i, a := range u.Addresses {
		if !a.IsValid() {
			continue
		}
		if first, dup := seen[a.Addr()]; dup {
			p.Errorf(m.addrLines[i], fmt.Sprintf("%s.addresses[%d]", m.uplinks.Path, i), "%s is listed twice (first on line %d)", a.Addr(), first)
		}
		seen[a.Addr()] = m.addrLines[i]
	}
}

func (m *hostMeta) validateSRIOV(p *parser, h *Host) {
	pfs := map[string]int{}
	for i, it := range m.sriov {
		s := &h.SRIOV[i]
		if s.PF == "" {
			p.Missing(it, "pf", "name the physical function by netdev name or PCI address, such as pf: enp3s0f0np0")
		} else if first, dup := pfs[s.PF]; dup {
			p.ErrAt(it, "pf", "%s is configured twice (first on line %d); merge the entries", show(s.PF), first)
		} else {
			pfs[s.PF], _ = p.At(it, "pf")
		}
		idx := map[int]int{}
		for j, vi := range p.ItemsOf(it.Path+".vf", len(s.VF)) {
			vf := &s.VF[j]
			if vf.Index < 0 {
				p.Missing(vi, "index", "say which VF this is, counting from 0, such as index: 0")
				continue
			}
			l, path := p.At(vi, "index")
			if first, dup := idx[vf.Index]; dup {
				p.Errorf(l, path, "VF %d is configured twice (first on line %d); merge the entries", vf.Index, first)
			}
			idx[vf.Index] = l
			if s.VFs != nil && vf.Index >= *s.VFs {
				p.Errorf(l, path, "VF %d does not exist with vfs: %d (VFs count from 0 to %d); raise vfs or remove this entry", vf.Index, *s.VFs, *s.VFs-1)
			}
			caps := map[string]bool{}
			for _, c := range vf.IPsec {
				if caps[c] {
					p.ErrAt(vi, "ipsec", "%s is listed twice", c)
				}
				caps[c] = true
			}
		}
		if len(s.VF) > 0 && s.VFs == nil {
			p.Missing(it, "vfs", "per-VF settings need the number of VFs, such as vfs: %d", maxVF(s.VF)+1)
		}
	}
}

func maxVF(vfs []VFConfig) int {
	m := 0
	for _, v := range vfs {
		m = max(m, v.Index)
	}
	return m
}

func (m *hostMeta) validateVTEP(p *parser, h *Host, i int, claim func(string, string, int, string)) {
	it, v := m.vteps[i], &h.VTEPs[i]
	if v.Name == "" {
		p.Missing(it, "name", "name the VTEP device, such as name: vx0")
	}
	l, path := p.At(it, "name")
	claim(v.Name, path, l, "VTEP")
	if v.VNI == 0 && !p.Given[it.Path+".vni"] {
		p.Missing(it, "vni", "give the VXLAN/Geneve network identifier, such as vni: 1024")
	}
	if !v.Local.IsValid() {
		p.Missing(it, "local", "give this host's VTEP address (placed on lo as a /32), such as local: 192.168.80.2")
	}
	if len(v.Remotes) == 0 {
		p.Missing(it, "remotes", "list the remote VTEPs, such as remotes: [{address: 192.168.80.3, via: 192.168.70.3}]")
	}
	if v.Type == VTEPGeneve && len(v.Remotes) > 1 {
		p.ErrAt(it, "remotes", "a Geneve device has one remote; %d are listed: make one VTEP per remote (each with its own name and VNI or port)", len(v.Remotes))
	}
	if v.GeneveOptions > 0 && v.Type != VTEPGeneve {
		p.ErrAt(it, "geneve-options", "only applies to type: geneve; remove it")
	}
	seen := map[netip.Addr]int{}
	for j, ri := range p.ItemsOf(it.Path+".remotes", len(v.Remotes)) {
		r := v.Remotes[j]
		if !r.Address.IsValid() {
			if !p.Bad[ri.Path+".address"] && !p.Bad[ri.Path] {
				p.ErrAt(ri, "address", "missing; give the remote VTEP's address, such as address: 192.168.80.3")
			}
			continue
		}
		if first, dup := seen[r.Address]; dup {
			p.ErrAt(ri, "address", "%s is listed twice (first on line %d)", r.Address, first)
		}
		seen[r.Address] = r.Line
		if v.Local.IsValid() && r.Address.Is4() != v.Local.Is4() {
			p.ErrAt(ri, "address", "%s and local %s are of different IP families; a VTEP talks IPv4 or IPv6", r.Address, v.Local)
		}
		if v.Local.IsValid() && r.Address == v.Local {
			p.ErrAt(ri, "address", "%s is this host's own VTEP address (local)", r.Address)
		}
		if r.Via.IsValid() && r.Via.Is4() != r.Address.Is4() {
			p.ErrAt(ri, "via", "next hop %s and remote %s are of different IP families", r.Via, r.Address)
		}
	}
	for j, o := range h.VTEPs[:i] {
		if o.Type == v.Type && o.VNI == v.VNI && o.Port == v.Port && o.Local == v.Local && v.VNI != 0 {
			p.ErrAt(it, "vni", "%s VNI %d on UDP port %d from %s is already vteps[%d] (%s); the kernel allows one device per VNI and port: change vni or port", v.Type, v.VNI, v.Port, v.Local, j, o.Name)
		}
	}
}

func (m *hostMeta) validateIPsec(p *parser, h *Host) {
	s := h.IPsec
	m.validateIKE(p, h)
	if h.HasKeying(KeyingManual) && s.Keys == "" {
		p.Missing(m.ipsec, "keys", "name the key file (mode 0600), such as keys: /etc/sluice/%s.keys", h.Name)
	}
	names := map[string]int{}
	outSPI := map[string]int{} // remote/spi -> line
	inSPI := map[string]int{}
	selectors := map[[2]netip.Prefix]int{} // out-policy selector (local, remote) -> line
	for i, it := range m.peers {
		pr := &s.Peers[i]
		if pr.Name == "" {
			p.Missing(it, "name", "name the peer (the key file uses the name), such as name: node-b")
		} else if first, dup := names[pr.Name]; dup {
			p.ErrAt(it, "name", "%s is already a peer (line %d); peer names must be unique (the key file uses them)", show(pr.Name), first)
		} else {
			names[pr.Name], _ = p.At(it, "name")
		}
		if !pr.Local.IsValid() {
			p.Missing(it, "local", "give this host's address for the SAs (usually the VTEP address), such as local: 192.168.80.2")
		}
		if !pr.Remote.IsValid() {
			p.Missing(it, "remote", "give the peer's address, such as remote: 192.168.80.3")
		}
		if pr.Local.IsValid() && pr.Remote.IsValid() {
			if pr.Local.Is4() != pr.Remote.Is4() {
				p.ErrAt(it, "remote", "%s and local %s are of different IP families", pr.Remote, pr.Local)
			} else if pr.Local == pr.Remote {
				p.ErrAt(it, "remote", "is the same as local (%s)", pr.Local)
			}
		}
		if pr.Keying == KeyingIKE {
			m.validateIKEPeer(p, h, i)
		}
		if pr.SPIOut == 0 && pr.Keying != KeyingIKE {
			p.Missing(it, "spi-out", "give the SPI of the outbound SA (the peer's spi-in), such as spi-out: 0x1001")
		}
		if pr.SPIIn == 0 && pr.Keying != KeyingIKE {
			p.Missing(it, "spi-in", "give the SPI of the inbound SA (the peer's spi-out), such as spi-in: 0x1002")
		}
		if pr.SPIOut != 0 && pr.Remote.IsValid() {
			k := fmt.Sprintf("%s/%d", pr.Remote, pr.SPIOut)
			l, path := p.At(it, "spi-out")
			if first, dup := outSPI[k]; dup {
				p.Errorf(l, path, "SPI %#x to %s is already used (line %d); an SA is identified by destination and SPI", pr.SPIOut, pr.Remote, first)
			}
			outSPI[k] = l
		}
		if pr.SPIIn != 0 && pr.Local.IsValid() {
			k := fmt.Sprintf("%s/%d", pr.Local, pr.SPIIn)
			l, path := p.At(it, "spi-in")
			if first, dup := inSPI[k]; dup {
				p.Errorf(l, path, "SPI %#x to %s is already used (line %d); an SA is identified by destination and SPI", pr.SPIIn, pr.Local, first)
			}
			inSPI[k] = l
		}
		if pr.ESN && pr.ReplayWindow == 0 {
			p.ErrAt(it, "replay-window", "esn needs a replay window; use 32 to %d (64 is usual)", MaxESNReplay)
		}
		if !pr.ESN && pr.ReplayWindow > MaxLegacyReplay {
			p.ErrAt(it, "replay-window", "%d is larger than %d, the most the kernel keeps without ESN; set esn: true for a window of up to %d, or use %d or less", pr.ReplayWindow, MaxLegacyReplay, MaxESNReplay, MaxLegacyReplay)
		}
		offloadKey, offloadMode := "offload", pr.Offload
		for _, k := range []string{"offload-out", "offload-in"} {
			if m := pr.OffloadFor(strings.TrimPrefix(k, "offload-")); p.Given[it.Path+"."+k] && m != OffloadModeNone {
				offloadKey, offloadMode = k, m
			}
		}
		switch {
		case (pr.OffloadOut != "" || pr.OffloadIn != "") && pr.Offloads() && pr.OffloadDev == "" && !p.Bad[it.Path+".offload-dev"]:
			p.ErrAt(it, offloadKey, "%s: %s needs offload-dev: the port or bond whose NIC does the work, such as offload-dev: bond0", offloadKey, offloadMode)
		case pr.OffloadOut != "" && pr.OffloadIn != "" && !pr.Offloads() && pr.OffloadDev != "":
			p.ErrAt(it, "offload-dev", "has no effect with offload: none; remove it, or set offload (or offload-out/offload-in): crypto, packet or auto")
		}
		if len(pr.Selectors) > 0 && pr.Mode != ModeTunnel {
			p.ErrAt(it, "selectors", "selectors apply to tunnel mode; transport mode protects traffic between local and remote themselves: remove selectors or set mode: tunnel")
		}
		for j, si := range p.ItemsOf(it.Path+".selectors", len(pr.Selectors)) {
			sel := pr.Selectors[j]
			if !sel.Local.IsValid() {
				p.Missing(si, "local", "give the local prefix, such as local: 10.0.0.0/24")
			}
			if !sel.Remote.IsValid() {
				p.Missing(si, "remote", "give the remote prefix, such as remote: 10.1.0.0/24")
			}
			if sel.Local.IsValid() && sel.Remote.IsValid() && sel.Local.Addr().Is4() != sel.Remote.Addr().Is4() {
				p.ErrAt(si, "remote", "%s and local %s are of different IP families", sel.Remote, sel.Local)
			}
		}
		m.claimSelectors(p, pr, it, selectors)
	}
}

// claimSelectors refuses a policy selector that an earlier peer or
// selector already uses: the kernel keeps one policy per selector and
// direction, so the plan would add the same policy twice. The selectors
// are the plan's: tunnel-mode selectors, else local/32 to remote/32.
func (m *hostMeta) claimSelectors(p *parser, pr *Peer, it item, seen map[[2]netip.Prefix]int) {
	type sel struct {
		k    [2]netip.Prefix
		line int
		path string
	}
	var sels []sel
	if pr.Mode == ModeTunnel && len(pr.Selectors) > 0 {
		for j, si := range p.ItemsOf(it.Path+".selectors", len(pr.Selectors)) {
			if s := pr.Selectors[j]; s.Local.IsValid() && s.Remote.IsValid() {
				sels = append(sels, sel{[2]netip.Prefix{s.Local.Masked(), s.Remote.Masked()}, si.Line, si.Path})
			}
		}
	} else if pr.Local.IsValid() && pr.Remote.IsValid() {
		l, path := p.At(it, "remote")
		sels = append(sels, sel{[2]netip.Prefix{netip.PrefixFrom(pr.Local, pr.Local.BitLen()), netip.PrefixFrom(pr.Remote, pr.Remote.BitLen())}, l, path})
	}
	for _, s := range sels {
		if first, dup := seen[s.k]; dup {
			p.Errorf(s.line, s.path, "traffic %s to %s is already protected (line %d); the kernel keeps one policy per selector and direction, so the plan would add it twice: remove one or make them differ", s.k[0], s.k[1], first)
			continue
		}
		seen[s.k] = s.line
	}
}
