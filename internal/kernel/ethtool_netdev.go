// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"errors"
	"fmt"
	"net"
	"sort"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NetdevFacts is what `ip -d link` and `ethtool -i` say about one
// interface, as the diagnosis needs it.
type NetdevFacts struct {
	Name  string `json:"name"`
	Index int    `json:"index"`
	// Kind is the rtnetlink link kind: "device" for hardware (and
	// netdevsim), else "bond", "vlan", "veth", "vxlan", "geneve"...
	Kind   string `json:"kind"`
	Driver string `json:"driver,omitempty"`
	PCI    string `json:"pci,omitempty"`
	Master string `json:"master,omitempty"`
	// Lower is the device a VLAN or VXLAN sits on.
	Lower string `json:"lower,omitempty"`
	// OuterIPv6: a VXLAN or Geneve device whose tunnel runs over IPv6.
	OuterIPv6  bool   `json:"outer_ipv6,omitempty"`
	MTU        int    `json:"mtu"`
	GSOMaxSize uint32 `json:"gso_max_size,omitempty"`
	Up         bool   `json:"up"`
	NumRxQueue int    `json:"num_rx_queues,omitempty"`
	// Bond only.
	BondMode    string   `json:"bond_mode,omitempty"`
	ActiveSlave string   `json:"active_slave,omitempty"`
	Slaves      []string `json:"slaves,omitempty"`
	// XDP: "" (none), "native", "generic" or "offload".
	XDPMode   string `json:"xdp_mode,omitempty"`
	XDPProgID uint32 `json:"xdp_prog_id,omitempty"`
}

// Netdevs lists the interfaces of the calling thread's network namespace
// (lo left out), sorted by name.
func Netdevs() ([]NetdevFacts, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	byIndex := map[int]string{}
	for _, l := range links {
		byIndex[l.Attrs().Index] = l.Attrs().Name
	}
	var out []NetdevFacts
	for _, l := range links {
		a := l.Attrs()
		if a.Flags&net.FlagLoopback != 0 {
			continue
		}
		f := NetdevFacts{Name: a.Name, Index: a.Index, Kind: l.Type(), MTU: a.MTU, GSOMaxSize: a.GSOMaxSize,
			Up: a.Flags&net.FlagUp != 0, NumRxQueue: a.NumRxQueues, Master: byIndex[a.MasterIndex]}
		if a.ParentIndex != 0 {
			f.Lower = byIndex[a.ParentIndex]
		}
		switch v := l.(type) {
		case *netlink.Bond:
			f.BondMode = v.Mode.String()
			f.ActiveSlave = byIndex[v.ActiveSlave]
		case *netlink.Vxlan:
			if v.VtepDevIndex != 0 {
				f.Lower = byIndex[v.VtepDevIndex]
			}
			f.OuterIPv6 = v.Group.To4() == nil && v.Group != nil || v.SrcAddr.To4() == nil && v.SrcAddr != nil
		case *netlink.Geneve:
			f.OuterIPv6 = v.Remote.To4() == nil && v.Remote != nil
		}
		if x := a.Xdp; x != nil && x.Attached {
			f.XDPProgID = x.ProgId
			switch x.AttachMode {
			case xdpAttachedDrv:
				f.XDPMode = "native"
			case xdpAttachedSKB:
				f.XDPMode = "generic"
			case xdpAttachedHW:
				f.XDPMode = "offload"
			case xdpAttachedMulti:
				f.XDPMode = "multi"
			}
		}
		if drv, bus, err := EthtoolDriver(a.Name); err == nil {
			f.Driver = drv
			if len(bus) == len("0000:00:00.0") && bus[4] == ':' {
				f.PCI = bus
			}
		}
		out = append(out, f)
	}
	for i := range out {
		for _, o := range out {
			if o.Master == out[i].Name {
				out[i].Slaves = append(out[i].Slaves, o.Name)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// IFLA_XDP_ATTACHED values.
const (
	xdpAttachedDrv   = 1
	xdpAttachedSKB   = 2
	xdpAttachedHW    = 3
	xdpAttachedMulti = 4
)

// TCFilter is one tc filter on an interface's clsact/ingress hooks.
type TCFilter struct {
	Hook     string `json:"hook"` // "ingress" or "egress"
	Kind     string `json:"kind"` // "flower", "bpf", "u32"...
	Priority uint16 `json:"pref"`
	SkipHW   bool   `json:"skip_hw,omitempty"`
	SkipSW   bool   `json:"skip_sw,omitempty"`
}

// TCFilters lists the filters on ifname's ingress and egress hooks.
func TCFilters(ifname string) ([]TCFilter, error) {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w", ifname, err)
	}
	var out []TCFilter
	for _, h := range []struct {
		name   string
		parent uint32
	}{{"ingress", netlink.HANDLE_MIN_INGRESS}, {"egress", netlink.HANDLE_MIN_EGRESS}} {
		fs, err := netlink.FilterList(l, h.parent)
		if err != nil {
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				continue // no clsact/ingress qdisc
			}
			return nil, fmt.Errorf("tc filter show dev %s %s: %w", ifname, h.name, err)
		}
		for _, f := range fs {
			tf := TCFilter{Hook: h.name, Kind: f.Type(), Priority: f.Attrs().Priority}
			if v, ok := f.(*netlink.Flower); ok {
				tf.SkipHW, tf.SkipSW = v.SkipHw, v.SkipSw
			}
			out = append(out, tf)
		}
	}
	return out, nil
}
