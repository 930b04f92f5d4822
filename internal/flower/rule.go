// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Kind is what a rule does.
type Kind uint8

const (
	// KindForward forwards matching packets in the NIC.
	KindForward Kind = iota
	// KindTTLGuard hands packets with TTL / hop limit 0 or 1 to the host
	// (XDP, then the kernel, which sends ICMP time exceeded). It sits at a
	// higher priority than the forwarding rules of its device, chain,
	// VLAN and family.
	KindTTLGuard
	// KindICMPGuard hands every ICMP / ICMPv6 packet to the host: the
	// kernel matches ICMP errors against policies by their inner header
	// (and i12's XDP program models that), which no flower key can.
	KindICMPGuard
	// KindSrcGuard hands packets from one of this host's own addresses
	// inside a forward's source prefix to the host: the kernel drops them
	// as martians (an own source), a forward must not carry them.
	KindSrcGuard
)

// Direction of a forwarding rule.
type Direction uint8

const (
	Outbound Direction = iota
	Inbound
)

func (d Direction) String() string { return [...]string{"outbound", "inbound"}[d&1] }

// Filter priorities (tc "pref"). tc keeps one protocol per priority
// within a chain, so each protocol (802.1Q, IPv4, IPv6) has its own pair:
// the guards first, then every forward. Forwards never overlap one another
// (Derive emits no two rules whose selectors overlap), so their order
// within a priority does not matter. The range is sluice's own, far from
// the small numbers people and tools pick, so `sluice gateway stop` and a
// restarted daemon can remove exactly sluice's filters (a rule a killed
// daemon left) without knowing the configuration.
const (
	PrefGuard   = 49001 // + protocol offset 0-2
	PrefForward = 49004 // + protocol offset 0-2
	prefMax     = 49006
)

// prefFor returns the priority of a rule of this kind and protocol.
func prefFor(k Kind, vlan uint16, v6 bool) uint16 {
	off := uint16(0)
	switch {
	case vlan != 0:
	case !v6:
		off = 1
	default:
		off = 2
	}
	if k == KindForward {
		return PrefForward + off
	}
	return PrefGuard + off
}

// Rule is one tc flower filter in the terms the installer encodes.
type Rule struct {
	Kind  Kind
	Dir   Direction
	Dev   int    // ifindex of the device the filter sits on (the port that receives the frames)
	Chain uint32 // 0 for outbound; the post-decrypt chain for inbound
	Pref  uint16
	IPv6  bool
	// VLANID matches the 802.1Q tag (0: untagged frames).
	VLANID uint16
	// MatchDstMAC, when set, is the only destination MAC matched (the
	// ingress interface's own).
	MatchDstMAC net.HardwareAddr
	// The selector (KindForward).
	Src, Dst         netip.Prefix
	Proto            uint8
	SPort, SPortMask uint16
	DPort, DPortMask uint16
	PopVLAN          bool
	DecTTL           bool
	SrcMAC, DstMAC   net.HardwareAddr // nil: the NIC writes L2 (l2: nic)
	PushVLAN         uint16
	MTU              int // larger packets go to the host (the kernel sends ICMP); 0: no check
	// UseTime: one packet a second goes to the host instead, which the
	// kernel forwards, stamping the XFRM policies' use times strongSwan
	// reads (the rule's own packets pass neither xfrm_lookup nor the
	// policy check).
	UseTime               bool
	Redirect              int // egress device (mirred egress redirect)
	ownSources            []netip.Addr
	PolicyIndex           uint32
	Port                  string // the configured interface the rule serves (for show)
	RedirectName, DevName string
}

// Key identifies the rule's match: two rules with the same key are the
// same filter. The installer keys its reconciliation on it.
func (r *Rule) Key() string {
	if r.Kind != KindForward {
		return fmt.Sprintf("%d/%d/guard%d/v%d/6=%v/%s", r.Dev, r.Chain, r.Kind, r.VLANID, r.IPv6, r.Src)
	}
	return fmt.Sprintf("%d/%d/%d/v%d/%s>%s/p%d/%d&%d/%d&%d", r.Dev, r.Chain, r.Pref, r.VLANID, r.Src, r.Dst,
		r.Proto, r.SPort, r.SPortMask, r.DPort, r.DPortMask)
}

// String is the rule as `tc filter add` would take it (for dry runs,
// docs and messages).
func (r *Rule) String() string {
	s := fmt.Sprintf("dev %s chain %d pref %d", nameOr(r.DevName, r.Dev), r.Chain, r.Pref)
	if r.VLANID != 0 {
		s += fmt.Sprintf(" protocol 802.1Q flower vlan_id %d vlan_ethtype %s", r.VLANID, ipv(r.IPv6))
	} else {
		s += " protocol " + ipv(r.IPv6) + " flower"
	}
	switch r.Kind {
	case KindTTLGuard:
		return s + " ip_ttl 0/0xfe action pass"
	case KindICMPGuard:
		return s + fmt.Sprintf(" ip_proto %d action pass", icmpProto(r.IPv6))
	case KindSrcGuard:
		return s + fmt.Sprintf(" src_ip %s action pass", r.Src)
	}
	if r.MatchDstMAC != nil {
		s += " dst_mac " + r.MatchDstMAC.String()
	}
	s += fmt.Sprintf(" src_ip %s dst_ip %s ip_flags nofrag", r.Src, r.Dst)
	if r.Proto != 0 {
		s += fmt.Sprintf(" ip_proto %d", r.Proto)
	}
	if r.SPortMask != 0 {
		s += fmt.Sprintf(" src_port %d/0x%x", r.SPort, r.SPortMask)
	}
	if r.DPortMask != 0 {
		s += fmt.Sprintf(" dst_port %d/0x%x", r.DPort, r.DPortMask)
	}
	if r.MTU != 0 {
		s += fmt.Sprintf(" action police mtu %d conform-exceed pass/pipe", r.MTU)
	}
	if r.UseTime {
		s += " action police pkts_rate 1 pkts_burst 1 conform-exceed pipe/ok"
	}
	if r.PopVLAN {
		s += " action vlan pop"
	}
	if r.DecTTL {
		if r.IPv6 {
			s += " action pedit ex munge ip6 hoplimit add 0xff"
		} else {
			s += " action pedit ex munge ip ttl add 0xff"
		}
	}
	if r.DstMAC != nil {
		s += fmt.Sprintf(" action pedit ex munge eth dst set %s munge eth src set %s", r.DstMAC, r.SrcMAC)
	}
	if r.DecTTL && !r.IPv6 {
		s += " action csum ip"
	}
	if r.PushVLAN != 0 {
		s += fmt.Sprintf(" action vlan push id %d", r.PushVLAN)
	}
	return s + fmt.Sprintf(" action mirred egress redirect dev %s", nameOr(r.RedirectName, r.Redirect))
}

func ipv(v6 bool) string {
	if v6 {
		return "ipv6"
	}
	return "ip"
}

func nameOr(name string, idx int) string {
	if name != "" {
		return name
	}
	return fmt.Sprintf("if%d", idx)
}

func icmpProto(v6 bool) uint8 {
	if v6 {
		return 58
	}
	return 1
}

func itoa(v uint32) string { return fmt.Sprint(v) }

// TCBatchLine is the rule as a line of `tc -batch` input (benchmarks
// compare the installer with tc installing the same rules).
func (r *Rule) TCBatchLine(handle uint32, skipHW bool) string {
	s := r.String() // "dev D chain C pref P protocol X flower [vlan...] match... actions"
	skip := "skip_sw"
	if skipHW {
		skip = "skip_hw"
	}
	dev := "dev " + nameOr(r.DevName, r.Dev)
	s = strings.Replace(s, dev, dev+" ingress", 1)
	s = strings.Replace(s, " flower", fmt.Sprintf(" handle %d flower %s", handle, skip), 1)
	s = strings.ReplaceAll(s, "conform-exceed pass/pipe", "conform-exceed ok/pipe")
	return "filter add " + s
}
