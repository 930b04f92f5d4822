// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Creating, changing and deleting links, addresses and VXLAN FDB entries
// (`ip link`, `ip addr`, `bridge fdb`), in the calling thread's network
// namespace.

func linkByName(name string) (netlink.Link, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", name, err)
	}
	return l, nil
}

// BondAdd creates an active-backup bond (`ip link add NAME type bond mode
// active-backup miimon N`), with mtu when > 0.
func BondAdd(name string, miimon, mtu int) error {
	b := netlink.NewLinkBond(netlink.LinkAttrs{Name: name, MTU: mtu})
	b.Mode = netlink.BOND_MODE_ACTIVE_BACKUP
	b.Miimon = miimon
	if err := netlink.LinkAdd(b); err != nil {
		return fmt.Errorf("ip link add %s type bond: %w", name, err)
	}
	return nil
}

// BondSet changes a bond's miimon and primary (`ip link set NAME type bond
// miimon N primary PORT`); miimon < 0 or primary "" leave them.
func BondSet(name string, miimon int, primary string) error {
	l, err := linkByName(name)
	if err != nil {
		return err
	}
	b := netlink.NewLinkBond(netlink.LinkAttrs{Name: name, Index: l.Attrs().Index})
	b.Miimon = miimon
	if primary != "" {
		p, err := linkByName(primary)
		if err != nil {
			return err
		}
		b.Primary = p.Attrs().Index
	}
	if err := netlink.LinkModify(b); err != nil {
		return fmt.Errorf("ip link set %s type bond: %w", name, err)
	}
	return nil
}

// LinkSetMaster enslaves port to master ("" : release it). The kernel
// refuses to enslave a port that is up, so it is set down first.
func LinkSetMaster(port, master string) error {
	l, err := linkByName(port)
	if err != nil {
		return err
	}
	if master == "" {
		if err := netlink.LinkSetNoMaster(l); err != nil {
			return fmt.Errorf("ip link set %s nomaster: %w", port, err)
		}
		return nil
	}
	m, err := linkByName(master)
	if err != nil {
		return err
	}
	if l.Attrs().Flags&net.FlagUp != 0 {
		if err := netlink.LinkSetDown(l); err != nil {
			return fmt.Errorf("ip link set %s down: %w", port, err)
		}
	}
	if err := netlink.LinkSetMasterByIndex(l, m.Attrs().Index); err != nil {
		return fmt.Errorf("ip link set %s master %s: %w", port, master, err)
	}
	return nil
}

// LinkSetMTU is `ip link set NAME mtu N`.
func LinkSetMTU(name string, mtu int) error {
	l, err := linkByName(name)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("ip link set %s mtu %d: %w", name, mtu, err)
	}
	return nil
}

// LinkSetUp is `ip link set NAME up|down`.
func LinkSetUp(name string, up bool) error {
	l, err := linkByName(name)
	if err != nil {
		return err
	}
	if up {
		err = netlink.LinkSetUp(l)
	} else {
		err = netlink.LinkSetDown(l)
	}
	if err != nil {
		return fmt.Errorf("ip link set %s %s: %w", name, map[bool]string{true: "up", false: "down"}[up], err)
	}
	return nil
}

// LinkDelete is `ip link del NAME`.
func LinkDelete(name string) error {
	l, err := linkByName(name)
	if err != nil {
		return err
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("ip link del %s: %w", name, err)
	}
	return nil
}

// VXLANAdd creates a VXLAN device sourcing from local; remote, when
// valid, is its default destination (`ip link add NAME type vxlan id VNI
// local L [remote R] dstport P`).
func VXLANAdd(name string, vni uint32, local, remote netip.Addr, port uint16, mtu int) error {
	v := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}, VxlanId: int(vni),
		SrcAddr: net.IP(local.AsSlice()), Port: int(port), Learning: true}
	if remote.IsValid() {
		v.Group = net.IP(remote.AsSlice())
	}
	if err := netlink.LinkAdd(v); err != nil {
		return fmt.Errorf("ip link add %s type vxlan id %d: %w", name, vni, err)
	}
	return nil
}

// GeneveAdd creates a Geneve device (`ip link add NAME type geneve id VNI
// remote R dstport P`).
func GeneveAdd(name string, vni uint32, remote netip.Addr, port uint16, mtu int) error {
	g := &netlink.Geneve{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}, ID: vni, Remote: net.IP(remote.AsSlice()), Dport: port}
	if err := netlink.LinkAdd(g); err != nil {
		return fmt.Errorf("ip link add %s type geneve id %d: %w", name, vni, err)
	}
	return nil
}

// FDBAppend adds an all-zeros FDB entry towards dst on a VXLAN device
// (`bridge fdb append 00:00:00:00:00:00 dev NAME dst DST`); del removes it.
func FDBAppend(name string, dst netip.Addr, del bool) error {
	l, err := linkByName(name)
	if err != nil {
		return err
	}
	n := &netlink.Neigh{LinkIndex: l.Attrs().Index, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT | netlink.NUD_NOARP,
		Flags: netlink.NTF_SELF, HardwareAddr: make(net.HardwareAddr, 6), IP: net.IP(dst.AsSlice())}
	if del {
		err = netlink.NeighDel(n)
	} else {
		err = netlink.NeighAppend(n)
	}
	if err != nil {
		return fmt.Errorf("bridge fdb %s 00:00:00:00:00:00 dev %s dst %s: %w", map[bool]string{false: "append", true: "del"}[del], name, dst, err)
	}
	return nil
}

// AddrAdd adds (or, with del, removes) an address (`ip addr add|del P dev
// NAME`). IPv6 addresses skip duplicate address detection.
func AddrAdd(name string, p netip.Prefix, del bool) error {
	l, err := linkByName(name)
	if err != nil {
		return err
	}
	bits := 32
	if !p.Addr().Is4() {
		bits = 128
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), bits)}}
	if !p.Addr().Is4() {
		a.Flags = unix.IFA_F_NODAD
	}
	if del {
		err = netlink.AddrDel(l, a)
	} else {
		err = netlink.AddrAdd(l, a)
	}
	if err != nil {
		return fmt.Errorf("ip addr %s %s dev %s: %w", map[bool]string{false: "add", true: "del"}[del], p, name, err)
	}
	return nil
}

// IsNotExist reports an error meaning the object is already gone (ENOENT,
// ESRCH, ENODEV, EADDRNOTAVAIL), which teardown treats as done.
func IsNotExist(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENODEV) ||
		errors.Is(err, unix.EADDRNOTAVAIL) || strings.Contains(fmt.Sprint(err), "Link not found")
}

// BondActiveSlave returns the name of a bond's active port ("" if none),
// and whether name is a bond at all.
func BondActiveSlave(name string) (active string, isBond bool, err error) {
	l, err := linkByName(name)
	if err != nil {
		return "", false, err
	}
	b, ok := l.(*netlink.Bond)
	if !ok {
		return "", false, nil
	}
	if b.ActiveSlave <= 0 {
		return "", true, nil
	}
	s, err := netlink.LinkByIndex(b.ActiveSlave)
	if err != nil {
		return "", true, nil
	}
	return s.Attrs().Name, true, nil
}
