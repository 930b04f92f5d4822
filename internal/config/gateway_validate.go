// SPDX-License-Identifier: Apache-2.0

package config

import (
	"net/netip"
	"sort"
	"strings"
)

// applyDefaults fills the defaults that are not a key's `default:` tag:
// a number of 0 also means the default.
func (m *gatewayMeta) applyDefaults(g *Gateway) {
	if g.MetricsTopPolicies == 0 {
		g.MetricsTopPolicies = DefaultTopPolicies
	}
	for i := range g.Interfaces {
		if g.Interfaces[i].FlowerRuleBudget == 0 {
			g.Interfaces[i].FlowerRuleBudget = DefaultFlowerRuleBudget
		}
	}
}

// validate runs the checks that involve more than one field.
func (m *gatewayMeta) validate(p *parser, g *Gateway) {
	root := item{Line: m.rootLine}

	if g.PolicySource == PolicySourceStatic && !g.Lab && !p.Bad["lab"] {
		p.ErrAt(root, "policy-source", "\"static\" needs lab: true — static policies are for labs and offline tests; a production gateway mirrors the kernel: set lab: true or policy-source: kernel")
	}
	if g.FlowerTestSkipHW && !g.Lab && !p.Bad["lab"] {
		p.ErrAt(root, "flower-test-skip-hw", "true needs lab: true — it installs flower rules in software (skip_hw), which on a real port would send cleartext out of the offload device without the NIC's encryption; remove it, or set lab: true on a test gateway")
	}
	if g.FlowerTestPlacementInterval != 0 && !g.Lab && !p.Bad["lab"] {
		p.ErrAt(root, "flower-test-placement-interval", "needs lab: true — it shortens placement's %s interval so that a test sees promotions and demotions in seconds; remove it, or set lab: true on a test gateway", DefaultPlacementInterval)
	}
	if g.FlowerTestPlacementInterval != 0 && g.FlowerPromotePPS == 0 && !p.Bad["flower-promote-pps"] {
		p.ErrAt(root, "flower-test-placement-interval", "has no effect without flower-promote-pps (placement is off); set flower-promote-pps, or remove it")
	}
	if g.FlowerPromotePPS != 0 && !g.Counters && !p.Bad["counters"] {
		p.ErrAt(root, "flower-promote-pps", "needs counters: true — placement promotes tunnels from XDP's per-policy counters, which counters: false turns off, so no tunnel would ever reach the NIC; remove counters: false, or flower-promote-pps")
	}
	if g.PolicySource == PolicySourceKernel && m.nPolicies > 0 {
		p.ErrAt(root, "policies", "policy-source is kernel, so sluice mirrors the kernel's XFRM policies and would ignore these %d; remove policies, or for a lab set policy-source: static and lab: true", m.nPolicies)
	}

	switch {
	case !p.Given["interfaces"]:
		p.ErrAt(root, "interfaces", "missing; list at least one interface the fast path runs on, such as:  interfaces: [{name: p0}]")
	case m.nIfaces == 0 && !p.Bad["interfaces"]:
		p.ErrAt(root, "interfaces", "the list is empty; list at least one interface the fast path runs on, such as:  - name: p0")
	}

	names := map[string]int{} // interface name -> line of its name key
	for i, it := range m.ifaces {
		m.validateInterface(p, &g.Interfaces[i], it, names)
	}

	var known []string
	for _, ifc := range g.Interfaces {
		if ifc.Name != "" {
			known = append(known, ifc.Name)
		}
	}
	seen := map[selectorKey]item{}
	for i, it := range m.policies {
		m.validatePolicy(p, &g.Policies[i], it, names, known, seen)
	}
}

func (m *gatewayMeta) validateInterface(p *parser, ifc *Interface, it item, names map[string]int) {

	if ifc.Name == "" {
		p.Missing(it, "name", "every interface needs the Linux interface name, such as name: p0")
	}
	if ifc.Name != "" {
		l, path := p.At(it, "name")
		if first, dup := names[ifc.Name]; dup {
			p.Errorf(l, path, "%q is listed twice (first on line %d); list each interface once", ifc.Name, first)
		} else {
			names[ifc.Name] = l
		}
	}
	if ifc.Inbound == InboundForward && ifc.WANAntispoof == AntispoofNone {
		p.ErrAt(it, "inbound", "\"forward\" needs wan-antispoof: upstream on the same interface — XDP cannot tell a packet the NIC decrypted from spoofed cleartext, so inbound forwarding is only safe where the upstream segment drops cleartext from protected prefixes; set wan-antispoof: upstream if that is true, or inbound: pass")
	}
	if ifc.Flower.Inbound() && ifc.Inbound != InboundForward && !p.Bad[it.Path+".inbound"] {
		p.ErrAt(it, "flower", "%q forwards decrypted traffic in the NIC without the kernel's FWD check, the same trust as inbound: forward; set inbound: forward (with wan-antispoof: upstream) on this interface, or flower: outbound", ifc.Flower)
	}
	if ifc.HairpinToNexthop.IsValid() && ifc.Inbound == InboundPass {
		p.ErrAt(it, "hairpin-to-nexthop", "only applies with inbound: forward (it is where inbound-forwarded traffic is sent); remove it, or set inbound: forward")
	}
}

// selectorKey identifies a policy as the kernel does: one policy per
// direction and selector (priority is not part of it).
type selectorKey struct {
	dir          Direction
	src, dst     netip.Prefix
	proto        Protocol
	sport, dport uint16
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

func (m *gatewayMeta) validatePolicy(p *parser, sp *StaticPolicy, it item, names map[string]int, known []string, seen map[selectorKey]item) {
	ok := func(key string) bool { return !p.Bad[it.Path+"."+key] }
	given := func(key string) bool { return p.Given[it.Path+"."+key] }

	// Required keys.
	if !given("dir") {
		p.ErrAt(it, "dir", "missing; set dir: in, out or fwd")
	}
	for _, k := range []string{"src", "dst"} {
		if !given(k) {
			p.ErrAt(it, k, "missing; set %s: to a prefix such as 10.0.0.0/8 (0.0.0.0/0 or ::/0 for any)", k)
		}
	}

	// One family per selector, and the tunnel in the same family.
	selFam := ""
	if sp.Src.IsValid() && sp.Dst.IsValid() && family(sp.Src.Addr()) != family(sp.Dst.Addr()) {
		p.ErrAt(it, "dst", "%s is %s but src %s is %s; a selector has one address family: write both as IPv4 or both as IPv6 (one policy per family)",
			sp.Dst, family(sp.Dst.Addr()), sp.Src, family(sp.Src.Addr()))
	} else if sp.Src.IsValid() {
		selFam = family(sp.Src.Addr())
	} else if sp.Dst.IsValid() {
		selFam = family(sp.Dst.Addr())
	}
	if selFam != "" {
		for _, k := range []string{"peer", "local"} {
			a := sp.Peer
			if k == "local" {
				a = sp.Local
			}
			if a.IsValid() && family(a) != selFam {
				p.ErrAt(it, k, "%s is %s but the selector (src/dst) is %s; sluice's fast path does not carry one family inside the other: use %s tunnel endpoints, or a separate %s policy",
					a, family(a), selFam, selFam, family(a))
			}
		}
	} else if sp.Peer.IsValid() && sp.Local.IsValid() && family(sp.Peer) != family(sp.Local) {
		p.ErrAt(it, "local", "%s is %s but peer %s is %s; both tunnel endpoints must be of one family", sp.Local, family(sp.Local), sp.Peer, family(sp.Peer))
	}

	// Protocol and ports.
	if ok("proto") {
		for _, k := range []string{"sport", "dport"} {
			if !given(k) || !ok(k) {
				continue
			}
			l, path := p.At(it, k)
			switch {
			case sp.Proto == ProtoAny:
				p.Errorf(l, path, "a port needs proto: tcp, udp, sctp or udplite; set proto, or remove %s", k)
			case !sp.Proto.HasPorts():
				p.Errorf(l, path, "proto %s has no ports; remove %s, or use proto tcp, udp, sctp or udplite", sp.Proto, k)
			}
		}
		if selFam == "IPv6" && sp.Proto == ProtoICMP {
			p.ErrAt(it, "proto", "icmp is IPv4's ICMP but the selector is IPv6; write proto: icmpv6")
		}
		if selFam == "IPv4" && sp.Proto == ProtoICMPv6 {
			p.ErrAt(it, "proto", "icmpv6 is IPv6's ICMP but the selector is IPv4; write proto: icmp")
		}
	}

	// Allow policies are tunnels; block policies are not.
	switch sp.Action {
	case ActionAllow:
		for _, k := range []string{"peer", "local"} {
			if !given(k) {
				l, path := p.At(it, k)
				what := "the remote tunnel endpoint"
				if k == "local" {
					what = "our tunnel endpoint"
				}
				p.Errorf(l, path, "missing; an allow policy sends traffic through a tunnel: set %s: to %s, or action: block", k, what)
			}
		}
	case ActionBlock:
		for _, k := range []string{"peer", "local"} {
			if given(k) {
				p.ErrAt(it, k, "a block policy has no tunnel; remove %s, or set action: allow", k)
			}
		}
	}

	// Offload.
	switch sp.Offload {
	case OffloadPacket:
		if sp.Dir == DirFwd {
			p.ErrAt(it, "offload", "fwd policies are never packet-offloaded (the kernel checks them in software, and mlx5 refuses them); set offload: none")
		}
		if !given("offload-dev") {
			p.ErrAt(it, "offload", "packet offload needs offload-dev: naming the interface that does it (one of interfaces); add offload-dev, or set offload: none")
		}
	case OffloadNone:
		if given("offload-dev") {
			p.ErrAt(it, "offload-dev", "only used with offload: packet; remove it, or set offload: packet")
		}
	}
	if sp.OffloadDev != "" && sp.Offload == OffloadPacket {
		if _, ok := names[sp.OffloadDev]; !ok {
			l, path := p.At(it, "offload-dev")
			list := "none are listed"
			if len(known) > 0 {
				sorted := append([]string(nil), known...)
				sort.Strings(sorted)
				list = "the interfaces are " + strings.Join(sorted, ", ")
			}
			p.Errorf(l, path, "%q is not one of interfaces (%s); packet offload happens on a port the fast path runs on: add it to interfaces, or fix the name", sp.OffloadDev, list)
		}
	}

	// One policy per direction and selector.
	if sp.Dir != "" && sp.Src.IsValid() && sp.Dst.IsValid() && ok("proto") && ok("sport") && ok("dport") {
		k := selectorKey{sp.Dir, sp.Src, sp.Dst, sp.Proto, sp.Sport, sp.Dport}
		if first, dup := seen[k]; dup {
			p.Errorf(it.Line, it.Path, "same dir and selector as %s (line %d); the kernel keeps one policy per direction and selector: merge them, or change the selector", first.Path, first.Line)
		} else {
			seen[k] = it
		}
	}
}
