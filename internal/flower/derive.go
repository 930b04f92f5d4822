// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"net"
	"net/netip"

	"sluice/internal/fastpath"
	"sluice/internal/kernel/xfrm"
	"sluice/internal/mtu"
)

// Port is one configured gateway interface as the flower tier sees it.
type Port struct {
	Name    string
	Ifindex int
	// MAC is the interface's address: rules match it as the destination,
	// since the kernel drops frames for another host (PACKET_OTHERHOST).
	MAC net.HardwareAddr
	// VLAN child: the port that receives its tagged frames and its tag.
	ParentIfindex int
	ParentName    string
	VLANID        uint16
	Outbound      bool // flower: outbound or both
	Inbound       bool // flower: inbound or both (config: only with inbound: forward)
	// InboundForward is XDP's opt-in (inbound: forward with
	// wan-antispoof: upstream); inbound rules need it as well.
	InboundForward bool
	TTL            bool // flower-ttl
	L2FIB          bool // l2: fib (sluice writes the MACs)
	// Hairpin, when set, is where inbound traffic from this port goes
	// (hairpin-to-nexthop) instead of the FIB's choice.
	Hairpin *NextHop
	// Budget bounds the forwarding rules on the port's filter device
	// (0: none); the tier applies it, Derive does not.
	Budget int
}

// NextHop is where the FIB sends every address of a prefix.
type NextHop struct {
	Ifindex       int // egress interface (a VLAN child or a port)
	Name          string
	ParentIfindex int // VLAN child: its port
	ParentName    string
	VLANID        uint16
	DstMAC        net.HardwareAddr // nil when unresolved
	SrcMAC        net.HardwareAddr
	MTU           int
}

// Router answers where the kernel would send every address of a prefix.
type Router interface {
	// Route returns the next hop of every address in dst, or a reason
	// when the kernel would not route the whole prefix the same way
	// (local addresses, more specific routes, policy rules, unreachable).
	Route(dst netip.Prefix) (NextHop, string)
	// Source returns the addresses of this host inside src (the kernel
	// drops them as sources: each gets a guard rule) and "" when the
	// kernel accepts every other source in src on the ingress device
	// (reverse-path filtering), else the reason.
	Source(src netip.Prefix, ingress int) ([]netip.Addr, string)
}

// Input is what Derive works from.
type Input struct {
	Views           []fastpath.PolicyView
	FwdDefaultBlock bool
	Ports           []Port
	Router          Router
	InboundChain    uint32
	// UseTime gives each forward a police action that hands the kernel
	// one packet a second (Rule.UseTime).
	UseTime bool
	// Quirks, by offload device ifindex, is how each device's driver
	// departs from the kernel's XFRM (ReadDeviceQuirks): an outbound rule
	// goes only into a device that encrypts every packet it redirects.
	// A device missing here has none.
	Quirks map[int]DeviceQuirks

	idx *viewIndex
}

// Skip records a policy the flower tier leaves to XDP or the kernel, and
// why (shown by `show gateway`, and tested).
type Skip struct {
	PolicyIndex uint32 `json:"policy_index"`
	Port        string `json:"port"`
	Reason      string `json:"reason"`
}

// Result is the derived rule set.
type Result struct {
	Rules []Rule
	Skips []Skip
}

// Derive returns the flower rules for the policy set: one per (policy,
// serving port) where the XDP program's decision is a forward, the same
// forward, for every packet the rule can match; plus a TTL guard per
// device, chain, VLAN and family that carries rules with TTL handling.
func Derive(in Input) Result {
	var res Result
	guards := map[string]bool{}
	emit := func(r Rule, ttl bool) {
		r.Pref = prefFor(KindForward, r.VLANID, r.IPv6)
		res.Rules = append(res.Rules, r)
		var gs []Rule
		for _, k := range []Kind{KindICMPGuard, KindTTLGuard} {
			if k == KindTTLGuard && !ttl {
				continue
			}
			gs = append(gs, Rule{Kind: k, Dir: r.Dir, Dev: r.Dev, DevName: r.DevName, Chain: r.Chain, Pref: prefFor(k, r.VLANID, r.IPv6), IPv6: r.IPv6, VLANID: r.VLANID})
		}
		for _, a := range r.ownSources {
			gs = append(gs, Rule{Kind: KindSrcGuard, Dir: r.Dir, Dev: r.Dev, DevName: r.DevName, Chain: r.Chain, Pref: prefFor(KindSrcGuard, r.VLANID, r.IPv6), IPv6: r.IPv6, VLANID: r.VLANID,
				Src: netip.PrefixFrom(a, a.BitLen())})
		}
		for _, g := range gs {
			if !guards[g.Key()] {
				guards[g.Key()] = true
				res.Rules = append(res.Rules, g)
			}
		}
	}
	for i := range in.Views {
		v := &in.Views[i]
		p := &v.Policy
		if p.Action != xfrm.ActionAllow || v.OffloadIfindex == 0 || p.Dir == xfrm.DirFwd {
			continue
		}
		for pi := range in.Ports {
			port := &in.Ports[pi]
			var r Rule
			var why string
			switch {
			case p.Dir == xfrm.DirOut && port.Outbound:
				r, why = in.outbound(v, port)
			case p.Dir == xfrm.DirIn && port.Inbound && port.Ifindex == v.OffloadIfindex:
				r, why = in.inbound(v, port)
			default:
				continue
			}
			if why != "" {
				res.Skips = append(res.Skips, Skip{PolicyIndex: p.Index, Port: port.Name, Reason: why})
				continue
			}
			emit(r, port.TTL)
		}
	}
	return res
}

func (in *Input) outbound(v *fastpath.PolicyView, port *Port) (Rule, string) {
	p := &v.Policy
	if why := matchable(p.Sel); why != "" {
		return Rule{}, why
	}
	if why := in.uniform(v); why != "" {
		return Rule{}, why
	}
	own, why := in.Router.Source(p.Sel.Src, port.Ifindex)
	if why != "" {
		return Rule{}, "source: " + why
	}
	nh, why := in.Router.Route(p.Sel.Dst)
	if why != "" {
		return Rule{}, "route: " + why
	}
	if nh.Ifindex != v.OffloadIfindex {
		return Rule{}, "route: the FIB sends the destination out of " + nh.Name + ", not the SA's offload device"
	}
	if v.SAMTU == 0 {
		return Rule{}, "SA: its MTU is not known (no route to the peer, or an algorithm sluice cannot size)"
	}
	if why := deviceWillEncrypt(p, nh.Name, in.Quirks[v.OffloadIfindex]); why != "" {
		return Rule{}, why
	}
	r := baseRule(v, port, Outbound)
	r.UseTime = in.UseTime
	if port.ParentIfindex != 0 {
		r.Dev, r.DevName, r.VLANID, r.PopVLAN = port.ParentIfindex, port.ParentName, port.VLANID, true
	}
	r.Redirect, r.RedirectName, r.ownSources = nh.Ifindex, nh.Name, own
	r.MTU = policeMTU(min(nh.MTU, v.SAMTU))
	if in.l2FIB(v.OffloadIfindex) {
		if nh.DstMAC == nil {
			return Rule{}, "route: next hop not resolved yet (XDP resolves it per packet)"
		}
		r.DstMAC, r.SrcMAC = nh.DstMAC, nh.SrcMAC
	}
	return r, ""
}

func (in *Input) inbound(v *fastpath.PolicyView, port *Port) (Rule, string) {
	p := &v.Policy
	if !port.InboundForward {
		return Rule{}, "inbound: the port does not have inbound: forward"
	}
	if why := matchable(p.Sel); why != "" {
		return Rule{}, why
	}
	if why := in.uniform(v); why != "" {
		return Rule{}, why
	}
	own, why := in.Router.Source(p.Sel.Src, port.Ifindex)
	if why != "" {
		return Rule{}, "source: " + why
	}
	nh := port.Hairpin
	if nh == nil {
		route, why := in.Router.Route(p.Sel.Dst)
		if why != "" {
			return Rule{}, "route: " + why
		}
		nh = &route
	}
	if nh.DstMAC == nil {
		return Rule{}, "route: next hop not resolved yet (XDP resolves it per packet)"
	}
	r := baseRule(v, port, Inbound)
	r.UseTime = in.UseTime
	r.Chain, r.ownSources = in.InboundChain, own
	r.DstMAC, r.SrcMAC, r.MTU = nh.DstMAC, nh.SrcMAC, nh.MTU
	r.Redirect, r.RedirectName = nh.Ifindex, nh.Name
	if nh.ParentIfindex != 0 {
		r.PushVLAN, r.Redirect, r.RedirectName = nh.VLANID, nh.ParentIfindex, nh.ParentName
	}
	return r, ""
}

func baseRule(v *fastpath.PolicyView, port *Port, dir Direction) Rule {
	s := v.Policy.Sel
	return Rule{
		Kind: KindForward, Dir: dir, Dev: port.Ifindex, DevName: port.Name,
		IPv6: s.Dst.Addr().Is6(), Src: s.Src, Dst: s.Dst, Proto: s.Proto,
		SPort: s.SPort & s.SPortMask, SPortMask: s.SPortMask, DPort: s.DPort & s.DPortMask, DPortMask: s.DPortMask,
		DecTTL: port.TTL, PolicyIndex: v.Policy.Index, Port: port.Name, MatchDstMAC: port.MAC,
	}
}

// l2FIB reports whether sluice writes the MACs of frames leaving through
// dev (l2: fib on the configured port dev), as the XDP program does.
func (in *Input) l2FIB(dev int) bool {
	for _, p := range in.Ports {
		if p.Ifindex == dev {
			return p.L2FIB
		}
	}
	return false
}

// martians are addresses the kernel drops as source or destination
// (ip_route_input_slow, ip6_rcv_core, ip6_forward); the XDP program passes
// them to the kernel per packet, a rule cannot, so a selector that
// includes any stays with XDP.
var martians = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("224.0.0.0/4"), netip.MustParsePrefix("255.255.255.255/32"),
	netip.MustParsePrefix("::/128"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("fe80::/10"), netip.MustParsePrefix("::ffff:0:0/96"),
}

// matchable returns "" when flower can match exactly the selector.
func matchable(s xfrm.Selector) string {
	for _, m := range martians {
		if m.Overlaps(s.Src) || m.Overlaps(s.Dst) {
			return "martian: the selector includes " + m.String() + ", which the kernel drops"
		}
	}
	switch s.Proto {
	case 1, 58:
		return "icmp: ICMP stays with XDP and the kernel (errors match by their inner header)"
	case 0:
		if s.SPortMask|s.DPortMask != 0 {
			return "selector: ports without a protocol"
		}
	case 6, 17, 132:
	default:
		if s.SPortMask|s.DPortMask != 0 {
			return "selector: flower matches ports of TCP, UDP and SCTP only"
		}
	}
	return ""
}

// policeMTU is the `police mtu` that lets through exactly the packets of
// at most l3 bytes: at tc ingress act_police counts the Ethernet header too
// (tcf_police_mtu_check adds skb->mac_len, 14 once a VLAN tag has been
// taken off into the skb, as __netif_receive_skb_core does before tc), and
// checks each segment of a GRO aggregate, as the kernel's forward does.
func policeMTU(l3 int) int { return l3 + mtu.EthernetHeader }
