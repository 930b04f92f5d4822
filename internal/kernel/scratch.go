// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ScratchGateway is a throwaway network namespace shaped like a gateway's
// WAN side: a veth "wan0" with 123.0.0.1/16, a permanent neighbour
// 123.0.0.254 and routes to 48.0.0.0/8 and 2001:db8:48::/48 through it,
// forwarding on. Benchmarks run BPF_PROG_RUN in it so FIB lookups succeed.
type ScratchGateway struct {
	NS        netns.NsHandle
	WANIndex  int
	RouterMAC net.HardwareAddr
}

// NewScratchGateway creates the namespace. Close removes it.
func NewScratchGateway() (*ScratchGateway, error) {
	sg := &ScratchGateway{RouterMAC: net.HardwareAddr{0x02, 0xbb, 0, 0, 0, 1}}
	ns, err := NewNetns(sg.build)
	if err != nil {
		return nil, err
	}
	sg.NS = ns
	return sg, nil
}

func (sg *ScratchGateway) build() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return err
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "wan0"}, PeerName: "wan0p"}
	if err := netlink.LinkAdd(veth); err != nil {
		return err
	}
	for _, n := range []string{"wan0", "wan0p"} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
	}
	wan, err := netlink.LinkByName("wan0")
	if err != nil {
		return err
	}
	sg.WANIndex = wan.Attrs().Index
	for _, a := range []string{"123.0.0.1/16", "2001:db8:f::1/64"} {
		addr, _ := netlink.ParseAddr(a)
		addr.Flags = unix.IFA_F_NODAD
		if err := netlink.AddrAdd(wan, addr); err != nil {
			return err
		}
	}
	for _, gw := range []string{"123.0.0.254", "2001:db8:f::fe"} {
		if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: sg.WANIndex, IP: net.ParseIP(gw),
			HardwareAddr: sg.RouterMAC, State: netlink.NUD_PERMANENT}); err != nil {
			return err
		}
	}
	for dst, gw := range map[string]string{"48.0.0.0/8": "123.0.0.254", "2001:db8:48::/48": "2001:db8:f::fe"} {
		_, ipn, _ := net.ParseCIDR(dst)
		if err := netlink.RouteAdd(&netlink.Route{Dst: ipn, Gw: net.ParseIP(gw)}); err != nil {
			return err
		}
	}
	for _, k := range []string{"/proc/sys/net/ipv4/conf/all/forwarding", "/proc/sys/net/ipv4/conf/lo/forwarding", "/proc/sys/net/ipv6/conf/all/forwarding"} {
		if err := writeSysctl(k, "1"); err != nil {
			return err
		}
	}
	return nil
}

// Do runs fn on a thread inside the namespace.
func (sg *ScratchGateway) Do(fn func() error) error { return InNetns(sg.NS, fn) }

// Close destroys the namespace (it has no name and no other reference).
func (sg *ScratchGateway) Close() error { return sg.NS.Close() }

func writeSysctl(path, v string) error {
	fd, err := unix.Open(path, unix.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer unix.Close(fd)
	_, err = unix.Write(fd, []byte(v))
	return err
}
