// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"sluice/internal/config"
	"sluice/internal/fileread"
	"sluice/internal/kernel"
	"sluice/internal/mtu"
)

// The guest steps run last: the segment's bridge and its tunnel port only
// once the SAs and policies that encrypt the VTEP's traffic exist (the
// VTEP section has put the local address on lo and the routes in place),
// then the guests' ports, the VF driver bindings, and the domains.

// Journal kinds of the guest steps.
const (
	kindOVSBridge  = "ovs-bridge"
	kindOVSPort    = "ovs-port"
	kindOVSConfig  = "ovs-config"
	kindBridgePort = "bridge-port"
	kindDriver     = "driver"
	kindDomain     = "domain"
)

// DefaultGuestDir is where domain definitions are written.
var DefaultGuestDir = "/run/sluice/guests"

// ovsOwned reports whether the VTEP called name is realised as Open
// vSwitch tunnel ports (its guest network is on OVS) rather than as a
// Linux device: a Linux VXLAN device and OVS's vxlan_sys_PORT cannot share
// the UDP port, and only OVS's tunnel port lets OVS offload the
// representor's encapsulation to the NIC (the ConnectX-6 SR-IOV guide).
func ovsOwned(h *config.Host, name string) bool {
	for _, n := range h.GuestNetworks {
		if n.VTEP == name && n.Bridge == config.BridgeOVS {
			return true
		}
	}
	return false
}

// guestMTU is the MTU of a guest network's ports and guests: the largest
// overlay MTU the uplink carries (sluice's exact arithmetic), or the
// largest whose encapsulated packet fits a 4 KiB page as mlx5 sizes its
// buffers (page-fit, the ConnectX-6 SR-IOV guide), or the file's mtu: checked against it.
// 0: unknown (no uplink MTU and no VTEP MTU).
func (p *planner) guestMTU(path string, n *config.GuestNetwork) int {
	v := p.h.VTEP(n.VTEP)
	stack, _ := p.vtepStack(v)
	limit := v.MTU
	if p.uplinkMTU > 0 {
		limit = stack.MaxOverlay(p.uplinkMTU, stack.UnderlayLen)
		if v.MTU > 0 {
			limit = min(limit, v.MTU)
		}
	}
	switch {
	case n.MTU > 0:
		if limit > 0 && n.MTU > limit {
			p.fail("%s: mtu %d is more than the VTEP %s carries (%d for uplink MTU %d: %s); use mtu %d or less",
				path, n.MTU, v.Name, limit, p.uplinkMTU, stack.Arithmetic(limit), limit)
			return 0
		}
		return n.MTU
	case n.PageFit:
		page := stack.MaxOverlay(mtu.PageSize, stack.MLX5BufferLen)
		if limit > 0 {
			page = min(page, limit)
		}
		p.note("%s: MTU %d fits a %d-byte page as mlx5 sizes its receive buffer (packet + %d): %s", path, page, mtu.PageSize, mtu.MLX5HardMTU, stack.Arithmetic(page))
		return page
	}
	if limit > 0 {
		p.note("%s: guest MTU %d, the largest overlay MTU the uplinks carry: %s", path, limit, stack.Arithmetic(limit))
	}
	return limit
}

// guests plans the guest networks and the guests.
func (p *planner) guests() {
	if len(p.h.GuestNetworks) == 0 {
		return
	}
	gl := p.live.Guests
	if gl == nil {
		gl = &GuestLive{Bridges: map[string][]string{}, Ifaces: map[string]OVSIface{}, VFs: map[string]VFLive{}, Domains: map[string]bool{}}
	}
	mtus := map[string]int{}
	for i := range p.h.GuestNetworks {
		n := &p.h.GuestNetworks[i]
		path := fmt.Sprintf("guest-networks[%d] (%s)", i, n.Name)
		mtus[n.Name] = p.guestMTU(path, n)
		if n.Bridge == config.BridgeOVS {
			p.ovsNetwork(path, n, gl, mtus[n.Name])
		} else {
			p.linuxNetwork(n, mtus[n.Name])
		}
	}
	for i := range p.h.Guests {
		g := &p.h.Guests[i]
		path := fmt.Sprintf("guests[%d] (%s)", i, g.Name)
		n := p.h.GuestNetwork(g.Network)
		mtu := mtus[n.Name]
		if g.MTU > 0 && mtu > 0 && g.MTU > mtu {
			p.fail("%s: mtu %d is more than network %s carries (%d); a guest segment that large is segmented in software by the host or dropped (the VM single-flow guide): use mtu %d or less", path, g.MTU, n.Name, mtu, mtu)
			continue
		}
		if g.MTU > 0 {
			mtu = g.MTU
		}
		p.guest(path, g, n, gl, mtu)
	}
}

func (p *planner) ovsNetwork(path string, n *config.GuestNetwork, gl *GuestLive, mtu int) {
	if gl.OVSErr != "" {
		p.fail("%s: bridge: ovs needs Open vSwitch running: %s", path, gl.OVSErr)
		return
	}
	if gl.HWOffload != "true" {
		old := gl.HWOffload
		p.add(Step{Section: "guests", Action: "change", Object: "Open vSwitch other_config:hw-offload",
			Why:      fmt.Sprintf("%s, want true (OVS then offloads the representors' flows to the NIC through tc; ovs-vswitchd reads it at start: restart it once)", orUnset(old)),
			Commands: []string{"ovs-vsctl set Open_vSwitch . other_config:hw-offload=true"}, run: func(r *runner) error {
				if _, err := ovsVsctl("set", "Open_vSwitch", ".", "other_config:hw-offload=true"); err != nil {
					return err
				}
				r.changed(entry{Kind: kindOVSConfig, Name: "hw-offload", Old: old, New: "true"})
				return nil
			}})
		gl.HWOffload = "true" // once per host, whatever the number of networks
	}
	br := n.BridgeName
	if _, ok := gl.Bridges[br]; !ok {
		p.add(Step{Section: "guests", Action: "create", Object: "ovs bridge " + br, Why: "missing",
			Commands: []string{"ovs-vsctl add-br " + br}, run: func(r *runner) error {
				if _, err := ovsVsctl("--may-exist", "add-br", br); err != nil {
					return err
				}
				r.created(entry{Kind: kindOVSBridge, Name: br})
				return nil
			}})
	}
	v := p.h.VTEP(n.VTEP)
	for i, rem := range v.Remotes {
		port := ovsTunnelPort(v, i)
		want := map[string]string{"local_ip": v.Local.String(), "remote_ip": rem.Address.String(),
			"key": strconv.FormatUint(uint64(v.VNI), 10), "dst_port": strconv.Itoa(int(v.Port))}
		cur, ok := gl.Ifaces[port]
		if ok && cur.Type == v.Type && mapsSubset(want, cur.Options) && slices.Contains(gl.Bridges[br], port) {
			continue
		}
		args := []string{"--may-exist", "add-port", br, port, "--", "set", "Interface", port, "type=" + v.Type}
		for _, k := range slices.Sorted(maps.Keys(want)) {
			args = append(args, "options:"+k+"="+want[k])
		}
		why := "missing"
		if ok {
			why = fmt.Sprintf("type %s options %v, want %s %v", cur.Type, cur.Options, v.Type, want)
		}
		p.add(Step{Section: "guests", Action: "create", Object: fmt.Sprintf("ovs port %s on %s", port, br), Why: why,
			Commands: []string{"ovs-vsctl " + strings.Join(args, " ")}, run: func(r *runner) error {
				if _, err := ovsVsctl(args...); err != nil {
					return err
				}
				r.created(entry{Kind: kindOVSPort, Name: port, Link: br})
				return nil
			}})
	}
	_ = mtu // OVS bridges carry any MTU; the ports' MTUs are set per guest.
}

// ovsTunnelPort names the OVS tunnel port of a VTEP's i-th remote: the
// VTEP's name with one remote (the ConnectX-6 SR-IOV guide's vxlan1), NAME-i with several.
func ovsTunnelPort(v *config.VTEP, i int) string {
	if len(v.Remotes) == 1 {
		return v.Name
	}
	return fmt.Sprintf("%s-%d", v.Name, i)
}

func (p *planner) linuxNetwork(n *config.GuestNetwork, mtu int) {
	br := n.BridgeName
	k := p.live.link(br)
	if k == nil {
		// ip takes mtu before "type": after it, the bridge's own options.
		cmd := "ip link add " + br
		if mtu > 0 {
			cmd += fmt.Sprintf(" mtu %d", mtu)
		}
		cmd += " type bridge"
		p.add(Step{Section: "guests", Action: "create", Object: "bridge " + br, Why: "missing", Commands: []string{cmd},
			run: func(r *runner) error {
				if err := kernel.BridgeAdd(br, mtu); err != nil {
					return err
				}
				r.created(entry{Kind: kindLink, Link: br})
				return nil
			}})
	} else if k.Kind != "bridge" {
		p.fail("guest network %s: %s exists and is a %s, not a bridge; delete it or set bridge-name", n.Name, br, kindName(k.Kind))
		return
	}
	p.bridgePort(br, n.VTEP, 0, config.BridgeLinux, false)
	if k == nil || !k.Up {
		p.setUpNoJournal("guests", br, "down")
	}
}

// bridgePort puts dev into bridge br (Linux or OVS) with mtu (0: left).
func (p *planner) bridgePort(br, dev string, mtu int, kind string, setUp bool) {
	k := p.live.link(dev)
	if mtu > 0 && (k == nil || k.MTU != mtu) {
		old := 0
		if k != nil {
			old = k.MTU
		}
		p.setMTU("guests", dev, old, mtu)
	}
	switch kind {
	case config.BridgeLinux:
		brk := p.live.link(br)
		if k != nil && brk != nil && k.Master == brk.Index {
			break
		}
		p.add(Step{Section: "guests", Action: "change", Object: "port " + dev, Why: "not in bridge " + br,
			Commands: []string{fmt.Sprintf("ip link set %s master %s", dev, br)}, run: func(r *runner) error {
				if err := kernel.LinkSetMaster(dev, br); err != nil {
					return err
				}
				r.created(entry{Kind: kindBridgePort, Link: dev, Name: br})
				// LinkSetMaster sets the port down to enslave it (bonds
				// need that); a bridge port is of use only up.
				return kernel.LinkSetUp(dev, true)
			}})
	default:
		if gl := p.live.Guests; gl != nil && slices.Contains(gl.Bridges[br], dev) {
			break
		}
		p.add(Step{Section: "guests", Action: "create", Object: fmt.Sprintf("ovs port %s on %s", dev, br), Why: "missing",
			Commands: []string{fmt.Sprintf("ovs-vsctl add-port %s %s", br, dev)}, run: func(r *runner) error {
				if _, err := ovsVsctl("--may-exist", "add-port", br, dev); err != nil {
					return err
				}
				r.created(entry{Kind: kindOVSPort, Name: dev, Link: br})
				return nil
			}})
	}
	if setUp && (k == nil || !k.Up) {
		p.setUp("guests", dev)
	}
}

// guest plans one guest: its port into the segment, the VF's settings and
// driver, and its domain.
func (p *planner) guest(path string, g *config.Guest, n *config.GuestNetwork, gl *GuestLive, mtu int) {
	switch g.Attach {
	case config.AttachRepresentor:
		dev := g.Port
		if g.VF != nil {
			vf := gl.VFs[vfKey(g.VF.PF, g.VF.Index)]
			if vf.Representor == "" {
				p.fail("%s: VF %d of %s has no representor (is sriov[].eswitch switchdev, and does the VF exist? devlink port show)", path, g.VF.Index, g.VF.PF)
				return
			}
			dev = vf.Representor
		} else if p.live.link(dev) == nil {
			p.fail("%s: port %s: no such interface here (ip link show)", path, dev)
			return
		}
		p.bridgePort(n.BridgeName, dev, mtu, n.Bridge, true)
	case config.AttachVFPassthrough:
		pf, err := p.live.resolve(g.VF.PF)
		if err != nil {
			p.fail("%s: vf.pf: %v", path, err)
			return
		}
		vf := gl.VFs[vfKey(g.VF.PF, g.VF.Index)]
		if vf.PCI == "" && !p.sriovCreates(g.VF.PF, g.VF.Index) {
			p.fail("%s: %s has no VF %d (cat /sys/class/net/%s/device/sriov_numvfs; set sriov[].vfs)", path, pf, g.VF.Index, pf)
			return
		}
		if k := p.live.link(pf); k != nil {
			p.vfSettings(pf, k, config.VFConfig{Index: g.VF.Index, MAC: g.MAC, VLAN: g.VLAN, Trust: g.Trust, SpoofChk: g.SpoofChk}, vf.PCI == "")
		}
		if vf.Representor != "" {
			p.bridgePort(n.BridgeName, vf.Representor, mtu, n.Bridge, true)
		} else {
			p.fail("%s: VF %d of %s has no representor to join %s (sriov[].eswitch: switchdev creates one; devlink port show)", path, g.VF.Index, pf, n.BridgeName)
		}
		p.vfioBind(path, g, vf)
	}
	p.domain(path, g, n, gl, mtu)
}

// sriovCreates reports whether the file's sriov section creates VF index
// of pf (the VF then does not exist yet at plan time).
func (p *planner) sriovCreates(pf string, index int) bool {
	for _, s := range p.h.SRIOV {
		if s.PF == pf && s.VFs != nil && index < *s.VFs {
			return true
		}
	}
	return false
}

// vfioBind binds a VF to vfio-pci through driver_override, so that only
// this device changes driver (the ConnectX-6 SR-IOV guide's new_id claims every device of
// that vendor/device pair), and explains the IOMMU group it needs.
func (p *planner) vfioBind(path string, g *config.Guest, vf VFLive) {
	if vf.Driver == "vfio-pci" {
		return
	}
	pci := vf.PCI
	if pci == "" {
		p.note("%s: the VF does not exist yet; run apply again after the VFs are created to bind it to vfio-pci", path)
		return
	}
	switch {
	case vf.IOMMUGroup == "":
		p.note("%s: %s is in no IOMMU group: the IOMMU is off (intel_iommu=on or amd_iommu=on on the kernel command line, and VT-d/AMD-Vi in the firmware); vfio-pci will refuse the VF and apply puts %s back", path, pci, orUnset(vf.Driver))
	case len(vf.GroupPeers) > 0:
		p.note("%s: IOMMU group %s holds %s besides %s: a group goes to a guest whole, so every device in it must be bound to vfio-pci (or unbound) first; with ACS on the PCIe path each VF has its own group", path, vf.IOMMUGroup, strings.Join(vf.GroupPeers, ", "), pci)
	default:
		p.note("%s: %s is alone in IOMMU group %s: it can be passed through", path, pci, vf.IOMMUGroup)
	}
	old := vf.Driver
	dev := filepath.Join("/sys/bus/pci/devices", pci)
	cmds := []string{"modprobe vfio-pci", fmt.Sprintf("echo vfio-pci > %s/driver_override", dev)}
	if old != "" {
		cmds = append(cmds, fmt.Sprintf("echo %s > /sys/bus/pci/drivers/%s/unbind", pci, old))
	}
	cmds = append(cmds, fmt.Sprintf("echo %s > /sys/bus/pci/drivers_probe", pci))
	p.add(Step{Section: "guests", Action: "change", Object: "driver of VF " + pci, Why: fmt.Sprintf("%s, want vfio-pci (guest %s)", orUnset(old), g.Name),
		Commands: cmds, run: func(r *runner) error {
			if err := BindDriver(pci, "vfio-pci"); err != nil {
				return err
			}
			r.changed(entry{Kind: kindDriver, Name: pci, Old: old, New: "vfio-pci"})
			return nil
		}})
}

// domain writes the guest's libvirt domain definition and defines it when
// asked.
func (p *planner) domain(path string, g *config.Guest, n *config.GuestNetwork, gl *GuestLive, mtu int) {
	d, err := NewDomain(g, n, gl.VFs, mtu, p.live.Topology)
	if err != nil {
		p.fail("%s: %v", path, err)
		return
	}
	for _, s := range d.Notes {
		p.note("%s: %s", path, s)
	}
	xml, err := d.XML()
	if err != nil {
		p.fail("%s: %v", path, err)
		return
	}
	file := filepath.Join(DefaultGuestDir, g.Name+".xml")
	if cur, err := fileread.Read(file, fileread.StateLimit); err != nil || string(cur) != xml {
		p.add(Step{Section: "guests", Action: "create", Object: "domain XML " + file, Why: "guest " + g.Name,
			Commands: []string{"cat > " + file + " <<'EOF'\n" + xml + "EOF"}, run: func(r *runner) error {
				if err := os.MkdirAll(DefaultGuestDir, 0o755); err != nil {
					return err
				}
				return os.WriteFile(file, []byte(xml), 0o644)
			}})
	}
	if g.Define && !gl.Domains[g.Name] {
		name := g.Name
		p.add(Step{Section: "guests", Action: "create", Object: "domain " + name, Why: "not defined",
			Commands: []string{"virsh define " + file}, run: func(r *runner) error {
				if out, err := runVirsh("define", file); err != nil {
					return fmt.Errorf("virsh define %s: %v: %s", file, err, out)
				}
				r.created(entry{Kind: kindDomain, Name: name})
				return nil
			}})
	}
}

func orUnset(s string) string {
	if s == "" {
		return "unset"
	}
	return s
}

func mapsSubset(want, have map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
