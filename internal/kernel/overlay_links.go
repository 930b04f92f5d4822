// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The link, address, route and FDB operations of `sluice apply`, and the
// snapshot the overlay planner compares the file with. Everything acts on
// the calling thread's network namespace.

// OvLink is one link as the overlay planner sees it.
type OvLink struct {
	Name   string
	Index  int
	Kind   string // "bond", "vxlan", "geneve", "veth", ... ("" for plain devices)
	MTU    int
	Up     bool
	Master int // ifindex of the master (bond), 0 if none
	Alias  string
	Addrs  []netip.Prefix
	Bond   *OvBond
	VXLAN  *OvVXLAN
	Geneve *OvGeneve
	VFs    []OvVF
	// Bus and Device name the device behind the netdev in sysfs (pci
	// 0000:03:00.0, netdevsim netdevsim10); empty for virtual devices.
	Bus, Device string
}

// OvBond is a bond's configuration.
type OvBond struct {
	Mode    string // "active-backup", "802.3ad", ...
	MIIMon  int
	Primary int // ifindex, 0 if none
	Active  int // ifindex of the active slave, 0 if none
}

// OvVXLAN is a VXLAN device's configuration.
type OvVXLAN struct {
	VNI    uint32
	Local  netip.Addr
	Remote netip.Addr // the default destination, invalid if none
	Port   uint16
	Dev    int
	// FDB holds the all-zeros entries' destinations (bridge fdb append
	// 00:00:00:00:00:00 dst ...).
	FDB []netip.Addr
}

// OvGeneve is a Geneve device's configuration.
type OvGeneve struct {
	VNI    uint32
	Remote netip.Addr
	Port   uint16
}

// OvVF is a VF's settings as its PF reports them.
type OvVF struct {
	Index    int
	MAC      string
	VLAN     int
	Trust    bool
	SpoofChk bool
}

// OvRoute is a main-table unicast route.
type OvRoute struct {
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

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// OverlayLinks lists every link with what the overlay planner compares.
func OverlayLinks() ([]OvLink, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("ip link show: %w", err)
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("ip addr show: %w", err)
	}
	byIdx := map[int][]netip.Prefix{}
	for _, a := range addrs {
		ones, _ := a.Mask.Size()
		byIdx[a.LinkIndex] = append(byIdx[a.LinkIndex], netip.PrefixFrom(addrOf(a.IP), ones))
	}
	out := make([]OvLink, 0, len(links))
	for _, l := range links {
		a := l.Attrs()
		ol := OvLink{Name: a.Name, Index: a.Index, Kind: l.Type(), MTU: a.MTU, Up: a.Flags&net.FlagUp != 0,
			Master: a.MasterIndex, Alias: a.Alias, Addrs: byIdx[a.Index]}
		if ol.Kind == "device" {
			ol.Kind = ""
		}
		switch v := l.(type) {
		case *netlink.Bond:
			ol.Bond = &OvBond{Mode: v.Mode.String(), MIIMon: v.Miimon, Primary: max(v.Primary, 0), Active: max(v.ActiveSlave, 0)}
		case *netlink.Vxlan:
			ol.VXLAN = &OvVXLAN{VNI: uint32(v.VxlanId), Local: addrOf(v.SrcAddr), Remote: addrOf(v.Group), Port: uint16(v.Port), Dev: v.VtepDevIndex}
			if fdb, err := netlink.NeighList(a.Index, unix.AF_BRIDGE); err == nil {
				for _, n := range fdb {
					if n.HardwareAddr.String() == "00:00:00:00:00:00" && n.IP != nil {
						ol.VXLAN.FDB = append(ol.VXLAN.FDB, addrOf(n.IP))
					}
				}
			}
		case *netlink.Geneve:
			ol.Geneve = &OvGeneve{VNI: v.ID, Remote: addrOf(v.Remote), Port: v.Dport}
		}
		for _, vf := range a.Vfs {
			ol.VFs = append(ol.VFs, OvVF{Index: vf.ID, MAC: vf.Mac.String(), VLAN: vf.Vlan, Trust: vf.Trust != 0, SpoofChk: vf.Spoofchk})
		}
		ol.Bus, ol.Device = sysfsDevice(a.Name)
		out = append(out, ol)
	}
	return out, nil
}

// sysfsDevice reads which bus device backs a netdev
// (/sys/class/net/NAME/device -> .../netdevsim10, subsystem -> bus).
func sysfsDevice(name string) (bus, dev string) {
	d, err := filepath.EvalSymlinks(filepath.Join("/sys/class/net", name, "device"))
	if err != nil {
		return "", ""
	}
	sub, err := filepath.EvalSymlinks(filepath.Join(d, "subsystem"))
	if err != nil {
		return "", ""
	}
	return filepath.Base(sub), filepath.Base(d)
}

// NetdevsOfPCI lists the netdevs of a PCI function (as this namespace's
// sysfs shows them).
func NetdevsOfPCI(addr string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join("/sys/bus/pci/devices", addr, "net"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("PCI device %s has no network interface here (lspci -s %s; is its driver bound, is it in this namespace?)", addr, addr)
		}
		return nil, err
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, nil
}

// OverlayRoutes lists the main table's unicast routes (IPv4 and IPv6).
func OverlayRoutes() ([]OvRoute, error) {
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("ip route show: %w", err)
	}
	var out []OvRoute
	for _, r := range rs {
		if r.Type != unix.RTN_UNICAST || r.Dst == nil {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		out = append(out, OvRoute{Dst: netip.PrefixFrom(addrOf(r.Dst.IP), ones), Via: addrOf(r.Gw), Src: addrOf(r.Src), Dev: r.LinkIndex, Proto: int(r.Protocol)})
	}
	return out, nil
}

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

// RouteDelete removes the main-table route to dst (`ip route del DST`).
func RouteDelete(dst netip.Prefix) error {
	if err := netlink.RouteDel(&netlink.Route{Dst: prefixNet(dst), Table: unix.RT_TABLE_MAIN}); err != nil {
		return fmt.Errorf("ip route del %s: %w", dst, err)
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
