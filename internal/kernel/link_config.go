// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Links as configured: kind, MTU, state, master, addresses and the
// bond/VXLAN/Geneve/VF settings, with the bus device behind each netdev
// (what `sluice apply` compares a host.yaml with). Everything acts on the
// calling thread's network namespace.

// LinkConfig is one link's configuration as the kernel reports it.
type LinkConfig struct {
	Name   string
	Index  int
	Kind   string // "bond", "vxlan", "geneve", "veth", ... ("" for plain devices)
	MTU    int
	Up     bool
	Master int // ifindex of the master (bond), 0 if none
	Alias  string
	Addrs  []netip.Prefix
	Bond   *BondConfig
	VXLAN  *VXLANConfig
	Geneve *GeneveConfig
	VFs    []VFConfig
	// Bus and Device name the device behind the netdev in sysfs (pci
	// 0000:03:00.0, netdevsim netdevsim10); empty for virtual devices.
	Bus, Device string
}

// BondConfig is a bond's configuration.
type BondConfig struct {
	Mode    string // "active-backup", "802.3ad", ...
	MIIMon  int
	Primary int // ifindex, 0 if none
	Active  int // ifindex of the active slave, 0 if none
}

// VXLANConfig is a VXLAN device's configuration.
type VXLANConfig struct {
	VNI    uint32
	Local  netip.Addr
	Remote netip.Addr // the default destination, invalid if none
	Port   uint16
	Dev    int
	// FDB holds the all-zeros entries' destinations (bridge fdb append
	// 00:00:00:00:00:00 dst ...).
	FDB []netip.Addr
}

// GeneveConfig is a Geneve device's configuration.
type GeneveConfig struct {
	VNI    uint32
	Remote netip.Addr
	Port   uint16
}

// VFConfig is a VF's settings as its PF reports them.
type VFConfig struct {
	Index    int
	MAC      string
	VLAN     int
	Trust    bool
	SpoofChk bool
}

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// LinkConfigs lists every link with its configuration.
func LinkConfigs() ([]LinkConfig, error) {
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
	out := make([]LinkConfig, 0, len(links))
	for _, l := range links {
		a := l.Attrs()
		ol := LinkConfig{Name: a.Name, Index: a.Index, Kind: l.Type(), MTU: a.MTU, Up: a.Flags&net.FlagUp != 0,
			Master: a.MasterIndex, Alias: a.Alias, Addrs: byIdx[a.Index]}
		if ol.Kind == "device" {
			ol.Kind = ""
		}
		switch v := l.(type) {
		case *netlink.Bond:
			ol.Bond = &BondConfig{Mode: v.Mode.String(), MIIMon: v.Miimon, Primary: max(v.Primary, 0), Active: max(v.ActiveSlave, 0)}
		case *netlink.Vxlan:
			ol.VXLAN = &VXLANConfig{VNI: uint32(v.VxlanId), Local: addrOf(v.SrcAddr), Remote: addrOf(v.Group), Port: uint16(v.Port), Dev: v.VtepDevIndex}
			if fdb, err := netlink.NeighList(a.Index, unix.AF_BRIDGE); err == nil {
				for _, n := range fdb {
					if n.HardwareAddr.String() == "00:00:00:00:00:00" && n.IP != nil {
						ol.VXLAN.FDB = append(ol.VXLAN.FDB, addrOf(n.IP))
					}
				}
			}
		case *netlink.Geneve:
			ol.Geneve = &GeneveConfig{VNI: v.ID, Remote: addrOf(v.Remote), Port: v.Dport}
		}
		for _, vf := range a.Vfs {
			ol.VFs = append(ol.VFs, VFConfig{Index: vf.ID, MAC: vf.Mac.String(), VLAN: vf.Vlan, Trust: vf.Trust != 0, SpoofChk: vf.Spoofchk})
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
			return nil, fmt.Errorf("PCI device %s has no network interface in this namespace: %w", addr, err)
		}
		return nil, err
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, nil
}
