// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"fmt"
	"net/netip"
	"os"
	"strings"

	"sluice/internal/config"
	"sluice/internal/diag"
	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// Live is the host as the planner compares it with the file. ReadLive
// fills it from the running kernel; tests build it by hand.
type Live struct {
	// Release is the kernel release (uname -r).
	Release  string
	Links    []kernel.LinkConfig
	Routes   []kernel.Route
	SAs      []xfrm.StateDetail
	Policies []xfrm.Policy
	// Features holds `ethtool -k` of the devices that matter (offload
	// devices), by name.
	Features map[string]map[string]kernel.EthFeature
	// PrivFlags holds `ethtool --show-priv-flags` of PFs with vf-ipsec.
	PrivFlags map[string]map[string]bool
	// NumVFs holds sriov_numvfs per PF name; absent: no SR-IOV.
	NumVFs map[string]int
	// Eswitch holds the eswitch mode per devlink handle ("pci/0000:03:00.0").
	Eswitch map[string]string
	// Params holds devlink parameters per handle (only those asked for);
	// a missing name means the device has no such parameter.
	Params map[string]map[string]string
	// VFCaps holds VF port function caps per "handle/vf".
	VFCaps map[string]kernel.VFPort
	// PCI maps PCI addresses written in the file to netdev names.
	PCI map[string]string
	// IKE is charon's state, for files with peers keyed by IKE.
	IKE *IKELive
	// OffloadHW holds the driver and SA table of offload devices, by
	// name (plan_offload_hw.go).
	OffloadHW map[string]OffloadHW
	// Guests and Topology are read only for files with guest networks
	// (guests_live.go): OVS, VF drivers, representors, NUMA placement.
	Guests   *GuestLive
	Topology *diag.Topology
}

// link returns the link called name, or nil.
func (l *Live) link(name string) *kernel.LinkConfig {
	for i := range l.Links {
		if l.Links[i].Name == name {
			return &l.Links[i]
		}
	}
	return nil
}

func (l *Live) linkByIndex(idx int) *kernel.LinkConfig {
	for i := range l.Links {
		if l.Links[i].Index == idx {
			return &l.Links[i]
		}
	}
	return nil
}

func (l *Live) nameOf(idx int) string {
	if k := l.linkByIndex(idx); k != nil {
		return k.Name
	}
	if idx == 0 {
		return ""
	}
	return fmt.Sprintf("#%d", idx)
}

// resolve turns a port as written in the file (name or PCI address) into
// a netdev name.
func (l *Live) resolve(port string) (string, error) {
	if !config.IsPCIAddress(port) {
		return port, nil
	}
	if n, ok := l.PCI[port]; ok {
		return n, nil
	}
	return "", fmt.Errorf("PCI device %s has no network interface in this namespace (lspci -s %s; check that its driver is bound)", port, port)
}

func devlinkHandle(k *kernel.LinkConfig) string {
	if k == nil || k.Bus == "" {
		return ""
	}
	return k.Bus + "/" + k.Device
}

// ReadLive snapshots what the file touches from the calling thread's
// network namespace.
func ReadLive(h *config.Host) (*Live, error) {
	l := &Live{Release: kernelRelease(), Features: map[string]map[string]kernel.EthFeature{},
		PrivFlags: map[string]map[string]bool{}, NumVFs: map[string]int{}, Eswitch: map[string]string{},
		Params: map[string]map[string]string{}, VFCaps: map[string]kernel.VFPort{}, PCI: map[string]string{}}
	var err error
	if l.Links, err = kernel.LinkConfigs(); err != nil {
		return nil, err
	}
	if l.Routes, err = kernel.Routes(); err != nil {
		return nil, err
	}
	if h.IPsec != nil {
		if l.SAs, err = xfrm.StateDetails(false); err != nil {
			return nil, err
		}
		if l.Policies, err = xfrm.DumpPolicies(); err != nil {
			return nil, err
		}
		if h.HasKeying(config.KeyingIKE) && h.IPsec.IKE != nil {
			l.IKE = readIKE(h)
		}
	}
	var ports []string
	if h.Uplinks != nil {
		ports = append(ports, h.Uplinks.Ports...)
	}
	for _, s := range h.SRIOV {
		ports = append(ports, s.PF)
	}
	for _, p := range ports {
		if !config.IsPCIAddress(p) {
			continue
		}
		names, err := kernel.NetdevsOfPCI(p)
		if err != nil {
			continue // reported by the planner when it needs the name
		}
		if len(names) == 1 {
			l.PCI[p] = names[0]
		}
	}
	readOffloadHW(l, h)
	// ethtool features of offload devices.
	if h.IPsec != nil {
		for _, p := range h.IPsec.Peers {
			if p.OffloadDev == "" || l.link(p.OffloadDev) == nil {
				continue
			}
			if _, done := l.Features[p.OffloadDev]; done {
				continue
			}
			if fs, err := kernel.EthtoolFeatures(p.OffloadDev); err == nil {
				l.Features[p.OffloadDev] = fs
			}
		}
	}
	for _, s := range h.SRIOV {
		name, err := l.resolve(s.PF)
		if err != nil {
			continue
		}
		k := l.link(name)
		if k == nil {
			continue
		}
		if n, ok, err := kernel.SRIOVNumVFs(name); err == nil && ok {
			l.NumVFs[name] = n
		}
		handle := devlinkHandle(k)
		if handle != "" && (s.Eswitch != "" || s.FlowSteering != "" || hasCaps(s)) {
			if mode, err := kernel.DevlinkEswitchMode(k.Bus, k.Device); err == nil {
				l.Eswitch[handle] = mode
			}
		}
		if handle != "" && s.FlowSteering != "" {
			if v, found, err := kernel.DevlinkParam(k.Bus, k.Device, "flow_steering_mode"); err == nil && found {
				l.Params[handle] = map[string]string{"flow_steering_mode": v}
			}
		}
		if handle != "" && hasCaps(s) {
			for _, vf := range s.VF {
				if len(vf.IPsec) == 0 {
					continue
				}
				if p, err := kernel.DevlinkVFPort(k.Bus, k.Device, vf.Index); err == nil {
					l.VFCaps[fmt.Sprintf("%s/%d", handle, vf.Index)] = *p
				}
			}
		}
		if s.VFIPsec != nil {
			if f, err := kernel.EthtoolPrivFlags(name); err == nil {
				l.PrivFlags[name] = f
			}
		}
	}
	if len(h.GuestNetworks) > 0 {
		l.Guests = ReadGuestLive(h, l)
		// Without a readable topology the vCPUs are left unpinned (the
		// plan says so); it is no reason to refuse the rest.
		l.Topology, _ = diag.ReadTopology(diag.Host)
	}
	return l, nil
}

func hasCaps(s config.SRIOV) bool {
	for _, vf := range s.VF {
		if len(vf.IPsec) > 0 {
			return true
		}
	}
	return false
}

// sa returns the live ESP SA (dst, spi), or nil.
func (l *Live) sa(dst netip.Addr, spi uint32) *xfrm.StateDetail {
	for i := range l.SAs {
		s := &l.SAs[i]
		if s.Dst == dst && s.SPI == spi && s.Proto == xfrm.ProtoESP {
			return s
		}
	}
	return nil
}

// policy returns the live main-type policy with this selector (any
// protocol and port, no mark, no interface id), or nil.
func (l *Live) policy(dir xfrm.Dir, src, dst netip.Prefix) *xfrm.Policy {
	for i := range l.Policies {
		p := &l.Policies[i]
		if p.Dir == dir && !p.Sub && p.Sel.Src == src.Masked() && p.Sel.Dst == dst.Masked() && p.Sel.Proto == 0 &&
			p.Sel.SPortMask == 0 && p.Sel.DPortMask == 0 && p.Mark == 0 && p.MarkMask == 0 && p.IfID == 0 && p.Sel.Ifindex == 0 {
			return p
		}
	}
	return nil
}

func (l *Live) route(dst netip.Prefix) *kernel.Route {
	for i := range l.Routes {
		if l.Routes[i].Dst == dst {
			return &l.Routes[i]
		}
	}
	return nil
}

// hasAddr reports whether link k carries address a (any prefix length).
func hasAddr(k *kernel.LinkConfig, a netip.Prefix) bool {
	if k == nil {
		return false
	}
	for _, x := range k.Addrs {
		if x == a {
			return true
		}
	}
	return false
}

func kernelRelease() string {
	rel, err := readRelease()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(rel)
}

func readRelease() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	return string(b), err
}
