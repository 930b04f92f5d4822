// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// What a lab made of real ports needs (sluice hwcheck): moving a port
// between namespaces, a veth to inject frames, permanent neighbours and
// device routes. Each acts in the calling thread's namespace (InNetns).

// LinkSetNetns moves the interface into ns (`ip link set NAME netns NS`).
// Its addresses stay behind (the kernel flushes them); it arrives down.
func LinkSetNetns(name string, ns netns.NsHandle) error {
	l, err := linkByName(name)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetNsFd(l, int(ns)); err != nil {
		return fmt.Errorf("ip link set %s netns: %w", name, err)
	}
	return nil
}

// LinkAddrs lists the interface's addresses, IPv6 link-local ones left
// out (the kernel makes those by itself).
func LinkAddrs(name string) ([]netip.Prefix, error) {
	l, err := linkByName(name)
	if err != nil {
		return nil, err
	}
	as, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("ip addr show %s: %w", name, err)
	}
	var out []netip.Prefix
	for _, a := range as {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || ip.Unmap().IsLinkLocalUnicast() {
			continue
		}
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip.Unmap(), ones))
	}
	return out, nil
}

// LinkMaster names the interface's master device (a bond, a bridge), or "".
func LinkMaster(name string) (string, error) {
	l, err := linkByName(name)
	if err != nil {
		return "", err
	}
	if l.Attrs().MasterIndex == 0 {
		return "", nil
	}
	m, err := netlink.LinkByIndex(l.Attrs().MasterIndex)
	if err != nil {
		return fmt.Sprintf("#%d", l.Attrs().MasterIndex), nil
	}
	return m.Attrs().Name, nil
}

// VethAdd creates a veth pair, both ends up (`ip link add A type veth
// peer name B`).
func VethAdd(a, b string) error {
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}, PeerName: b}); err != nil {
		return fmt.Errorf("ip link add %s type veth peer name %s: %w", a, b, err)
	}
	for _, n := range []string{a, b} {
		if err := LinkSetUp(n, true); err != nil {
			return err
		}
	}
	return nil
}

// NeighPermanent sets a permanent neighbour (`ip neigh replace IP lladdr
// MAC dev NAME nud permanent`).
func NeighPermanent(name string, ip netip.Addr, mac net.HardwareAddr) error {
	l, err := linkByName(name)
	if err != nil {
		return err
	}
	n := &netlink.Neigh{LinkIndex: l.Attrs().Index, IP: net.IP(ip.AsSlice()), HardwareAddr: mac, State: netlink.NUD_PERMANENT}
	if ip.Is4() {
		n.Family = unix.AF_INET
	} else {
		n.Family = unix.AF_INET6
	}
	if err := netlink.NeighSet(n); err != nil {
		return fmt.Errorf("ip neigh replace %s lladdr %s dev %s: %w", ip, mac, name, err)
	}
	return nil
}

// RouteDev installs a device route with a preferred source (`ip route
// replace DST dev NAME src SRC`).
func RouteDev(dst netip.Prefix, name string, src netip.Addr) error {
	l, err := linkByName(name)
	if err != nil {
		return err
	}
	r := &netlink.Route{Dst: prefixNet(dst), LinkIndex: l.Attrs().Index, Scope: netlink.SCOPE_LINK, Table: unix.RT_TABLE_MAIN}
	if src.IsValid() {
		r.Src = net.IP(src.AsSlice())
	}
	if err := netlink.RouteReplace(r); err != nil {
		return fmt.Errorf("ip route replace %s dev %s: %w", dst, name, err)
	}
	return nil
}

// SetSysctl writes a sysctl of the calling thread's namespace; key is
// its path below /proc/sys ("net/ipv6/conf/eth0/disable_ipv6"), which,
// unlike sysctl(8)'s dots, holds interface names with dots.
func SetSysctl(key, value string) error {
	p := filepath.Join("/proc/sys", filepath.Clean("/"+key))
	if _, err := os.Stat(p); err != nil {
		return fmt.Errorf("sysctl %s: %w", key, err)
	}
	return writeSysctl(p, value)
}

// LinkCarrier reports whether the interface is up with a carrier
// (IFF_LOWER_UP).
func LinkCarrier(name string) (bool, error) {
	l, err := linkByName(name)
	if err != nil {
		return false, err
	}
	return l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0, nil
}
