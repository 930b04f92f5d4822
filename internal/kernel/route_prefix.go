// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// PrefixRoute is where the kernel sends every address of a prefix.
type PrefixRoute struct {
	Ifindex int
	Name    string
	// VLAN child: its parent and tag.
	ParentIfindex int
	ParentName    string
	VLANID        uint16
	DstMAC        net.HardwareAddr // the next hop's MAC (nil: unresolved)
	SrcMAC        net.HardwareAddr
	MTU           int
}

// RoutePrefix returns the route the kernel's FIB takes for every address
// in dst, or a reason why that is not one answer: policy routing rules
// beyond the three defaults (the route may depend on the ingress, mark or
// ports), a local or non-unicast route, or a more specific route inside
// the prefix. It is what a hardware rule, which cannot ask the FIB per
// packet, may rely on.
func RoutePrefix(dst netip.Prefix) (PrefixRoute, string, error) {
	family := netlink.FAMILY_V4
	if dst.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	rules, err := netlink.RuleList(family)
	if err != nil {
		return PrefixRoute{}, "", fmt.Errorf("ip rule list: %w", err)
	}
	for _, r := range rules {
		if r.Priority != 0 && r.Priority != 32766 && r.Priority != 32767 {
			return PrefixRoute{}, fmt.Sprintf("policy routing rule %d may route part of the prefix differently", r.Priority), nil
		}
	}
	routes, err := netlink.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return PrefixRoute{}, "", fmt.Errorf("ip route list: %w", err)
	}
	var best *netlink.Route
	bestBits := -1
	for i := range routes {
		r := &routes[i]
		rp := routePrefix(r, family)
		if !rp.Overlaps(dst) {
			continue
		}
		if r.Table == unix.RT_TABLE_LOCAL && r.Type == unix.RTN_LOCAL || r.Type == unix.RTN_BROADCAST && rp.Bits() >= dst.Bits() {
			return PrefixRoute{}, "a local address of this host is inside the prefix", nil
		}
		if r.Table != unix.RT_TABLE_MAIN {
			continue
		}
		if rp.Bits() > dst.Bits() {
			return PrefixRoute{}, "a more specific route (" + rp.String() + ") is inside the prefix", nil
		}
		if rp.Bits() > bestBits {
			best, bestBits = r, rp.Bits()
		}
	}
	if best == nil {
		return PrefixRoute{}, "no route", nil
	}
	if best.Type != unix.RTN_UNICAST || best.LinkIndex == 0 || len(best.MultiPath) > 0 {
		return PrefixRoute{}, "the route is not a single unicast next hop", nil
	}
	l, err := LinkByIndex(best.LinkIndex)
	if err != nil {
		return PrefixRoute{}, "", err
	}
	nl, err := netlink.LinkByIndex(best.LinkIndex)
	if err != nil {
		return PrefixRoute{}, "", err
	}
	pr := PrefixRoute{Ifindex: l.Ifindex, Name: l.Name, VLANID: l.VLANID, ParentIfindex: l.ParentIfindex, SrcMAC: l.MAC, MTU: nl.Attrs().MTU}
	if best.MTU != 0 && best.MTU < pr.MTU {
		pr.MTU = best.MTU
	}
	if l.ParentIfindex != 0 {
		if p, err := LinkByIndex(l.ParentIfindex); err == nil {
			pr.ParentName = p.Name
		}
	}
	gw, ok := netip.AddrFromSlice(best.Gw)
	if !ok {
		if dst.Bits() != dst.Addr().BitLen() {
			return PrefixRoute{}, "an on-link prefix has one MAC per host", nil
		}
		gw = dst.Addr()
	}
	if _, mac, err := ResolveNextHop(gw.Unmap()); err == nil {
		pr.DstMAC = mac
	}
	return pr, "", nil
}

func routePrefix(r *netlink.Route, family int) netip.Prefix {
	if r.Dst == nil {
		if family == netlink.FAMILY_V6 {
			return netip.MustParsePrefix("::/0")
		}
		return netip.MustParsePrefix("0.0.0.0/0")
	}
	a, _ := netip.AddrFromSlice(r.Dst.IP)
	bits, _ := r.Dst.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), bits)
}

// SourceAccepted returns the addresses of this host inside src (the
// kernel drops them as sources: martians), and "" when it accepts every
// other source address in src arriving on ingress for forwarding, as far
// as the fast path mirrors it (docs/fastpath.md, rp-filter): forwarding
// on for the ingress (the device's own conf/<dev>/forwarding, which
// bpf_fib_lookup checks); for IPv4 with rp_filter loose (2) a unicast
// route back covering all of src with no unreachable, blackhole or
// prohibit route inside it; strict (1) is not mirrored. Otherwise it
// returns the reason.
func SourceAccepted(src netip.Prefix, ingress int) ([]netip.Addr, string, error) {
	family, ipv := netlink.FAMILY_V4, "ipv4"
	if src.Addr().Is6() {
		family, ipv = netlink.FAMILY_V6, "ipv6"
	}
	ingressName := ""
	if l, err := netlink.LinkByIndex(ingress); err == nil {
		ingressName = l.Attrs().Name
	}
	addrs, err := netlink.AddrList(nil, family)
	if err != nil {
		return nil, "", fmt.Errorf("ip addr list: %w", err)
	}
	var own []netip.Addr
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && src.Contains(ip.Unmap()) {
			own = append(own, ip.Unmap())
		}
	}
	if ingressName != "" {
		// The XDP program's FIB lookup passes what arrives on a device
		// with forwarding off (BPF_FIB_LKUP_RET_FWD_DISABLED), and so does
		// the kernel: a rule must not forward it.
		b, err := os.ReadFile("/proc/sys/net/" + ipv + "/conf/" + ingressName + "/forwarding")
		if err == nil && strings.TrimSpace(string(b)) == "0" {
			return own, fmt.Sprintf("%s forwarding is off on %s: the kernel and XDP do not forward what arrives there", ipv, ingressName), nil
		}
	}
	if family == netlink.FAMILY_V6 {
		return own, "", nil
	}
	mode := 0
	names := []string{"all"}
	if ingressName != "" {
		names = append(names, ingressName)
	}
	for _, n := range names {
		b, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + n + "/rp_filter")
		if err != nil {
			continue
		}
		if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > mode {
			mode = v
		}
	}
	switch mode {
	case 0:
		return own, "", nil
	case 1:
		return own, "rp_filter is strict on the ingress: the kernel checks each source against its route", nil
	}
	routes, err := netlink.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, "", fmt.Errorf("ip route list: %w", err)
	}
	covered := false
	for i := range routes {
		r := &routes[i]
		rp := routePrefix(r, family)
		if !rp.Overlaps(src) {
			continue
		}
		if r.Type != unix.RTN_UNICAST {
			return own, "rp_filter is loose and a " + rp.String() + " route without a way back overlaps the source prefix", nil
		}
		if rp.Bits() <= src.Bits() {
			covered = true
		}
	}
	if !covered {
		return own, "rp_filter is loose and no route leads back to the source prefix", nil
	}
	return own, "", nil
}
