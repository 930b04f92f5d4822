// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RouteMTUAt is the MTU of the output route from src to dst in namespace
// ns (netns.None(): the calling thread's), as dst_mtu gives it to an XFRM
// bundle's child route (xfrm_init_pmtu): a learnt PMTU exception while it
// has not expired, else the route's mtu metric (locked or not: output
// routes read it either way, ipv4_mtu and ip6_mtu), else the device's MTU
// (for IPv6 the device's IPv6 MTU, net.ipv6.conf.DEV.mtu). `ip route get
// DST from SRC` shows the same number. ifindex is the route's device.
func RouteMTUAt(ns netns.NsHandle, src, dst netip.Addr) (mtu, ifindex int, err error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return 0, 0, fmt.Errorf("route MTU to %s: %w", dst, err)
	}
	defer h.Close()
	var opt netlink.RouteGetOptions
	if src.IsValid() && !src.IsUnspecified() {
		opt.SrcAddr = src.AsSlice()
	}
	rs, err := h.RouteGetWithOptions(dst.AsSlice(), &opt)
	if err != nil || len(rs) == 0 {
		return 0, 0, fmt.Errorf("route MTU to %s: no route (%v)", dst, err)
	}
	r := rs[0]
	if r.MTU > 0 {
		return r.MTU, r.LinkIndex, nil
	}
	l, err := h.LinkByIndex(r.LinkIndex)
	if err != nil {
		return 0, 0, fmt.Errorf("route MTU to %s: device %d: %w", dst, r.LinkIndex, err)
	}
	mtu = l.Attrs().MTU
	if dst.Is6() && !dst.Is4In6() {
		read := func() error {
			b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + l.Attrs().Name + "/mtu")
			if err == nil {
				if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > 0 {
					mtu = v
				}
			}
			return nil
		}
		if ns.IsOpen() {
			err = InNetns(ns, read)
		} else {
			err = read()
		}
		if err != nil {
			return 0, 0, err
		}
	}
	return mtu, r.LinkIndex, nil
}
