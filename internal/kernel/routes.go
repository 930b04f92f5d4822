// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Main-table unicast routes: listed, replaced and deleted, in the calling
// thread's network namespace.

// Route is a main-table unicast route.
type Route struct {
	Dst   netip.Prefix
	Via   netip.Addr
	Src   netip.Addr
	Dev   int
	Proto int
}

// prefixNet is p as vishvananda/netlink takes it, host bits cleared.
func prefixNet(p netip.Prefix) *net.IPNet {
	bits := 32
	if !p.Addr().Is4() {
		bits = 128
	}
	return &net.IPNet{IP: net.IP(p.Masked().Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), bits)}
}

// Routes lists the main table's unicast routes (IPv4 and IPv6).
func Routes() ([]Route, error) {
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("ip route show: %w", err)
	}
	var out []Route
	for _, r := range rs {
		if r.Type != unix.RTN_UNICAST || r.Dst == nil {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		out = append(out, Route{Dst: netip.PrefixFrom(addrOf(r.Dst.IP), ones), Via: addrOf(r.Gw), Src: addrOf(r.Src), Dev: r.LinkIndex, Proto: int(r.Protocol)})
	}
	return out, nil
}

// RouteReplace installs dst via gw with a preferred source (`ip route
// replace DST via GW src SRC`).
func RouteReplace(dst netip.Prefix, via, src netip.Addr) error {
	r := &netlink.Route{Dst: prefixNet(dst), Gw: net.IP(via.AsSlice()), Table: unix.RT_TABLE_MAIN}
	if src.IsValid() {
		r.Src = net.IP(src.AsSlice())
	}
	if err := netlink.RouteReplace(r); err != nil {
		return fmt.Errorf("ip route replace %s via %s: %w", dst, via, err)
	}
	return nil
}

// RouteProtoSluice is the routing protocol number (rtm_protocol) of the
// routes sluice creates: `ip route show proto 115` lists them, and the
// overlay engine replaces a route only when it carries it. 115 is no
// protocol iproute2 names (rt_protos: 0-18, 42, 99, 186-192).
const RouteProtoSluice = 115

// RouteAddSluice creates dst via gw with a preferred source, marked as
// sluice's (`ip route add DST via GW src SRC proto 115`). It fails when a
// route to dst exists: whatever made it keeps it.
func RouteAddSluice(dst netip.Prefix, via, src netip.Addr) error {
	if err := netlink.RouteAdd(sluiceRoute(dst, via, src)); err != nil {
		return fmt.Errorf("ip route add %s via %s proto %d: %w", dst, via, RouteProtoSluice, err)
	}
	return nil
}

// RouteReplaceSluice changes a route sluice created (`ip route replace
// ... proto 115`); the caller has checked that it is sluice's.
func RouteReplaceSluice(dst netip.Prefix, via, src netip.Addr) error {
	if err := netlink.RouteReplace(sluiceRoute(dst, via, src)); err != nil {
		return fmt.Errorf("ip route replace %s via %s proto %d: %w", dst, via, RouteProtoSluice, err)
	}
	return nil
}

func sluiceRoute(dst netip.Prefix, via, src netip.Addr) *netlink.Route {
	r := &netlink.Route{Dst: prefixNet(dst), Gw: net.IP(via.AsSlice()), Table: unix.RT_TABLE_MAIN, Protocol: RouteProtoSluice}
	if src.IsValid() {
		r.Src = net.IP(src.AsSlice())
	}
	return r
}

// RouteDelete removes the main-table route to dst (`ip route del DST`).
func RouteDelete(dst netip.Prefix) error {
	if err := netlink.RouteDel(&netlink.Route{Dst: prefixNet(dst), Table: unix.RT_TABLE_MAIN}); err != nil {
		return fmt.Errorf("ip route del %s: %w", dst, err)
	}
	return nil
}
