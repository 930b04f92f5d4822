// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"slices"
)

// GuestNetwork is an overlay segment for virtual machines: one VNI (the
// VTEP it names), one bridge. Guests on different networks share nothing
// but the encrypted underlay (the ConnectX-6 SR-IOV guide's isolation goal).
type GuestNetwork struct {
	Name string
	// VTEP names the vteps[] entry whose VNI, type, port, local address and
	// remotes the segment carries; its SAs are the ones that cover it.
	VTEP string
	// Bridge is BridgeOVS (Open vSwitch, the ConnectX-6 SR-IOV guide's choice) or BridgeLinux.
	Bridge string
	// BridgeName is the bridge device (default "br-" + Name).
	BridgeName string
	// PageFit sizes the guest-facing MTU so that one encapsulated,
	// encrypted packet fits a 4 KiB page (the ConnectX-6 SR-IOV guide: 4096-110 = 3986).
	PageFit bool
	// MTU is the guest-facing MTU (bridge ports, representors, guests); 0:
	// computed from the uplink MTU (or the page) by sluice's arithmetic.
	MTU  int
	Line int
}

// Bridges a guest network can use.
const (
	BridgeOVS   = "ovs"
	BridgeLinux = "linux"
)

// Guest attachments.
const (
	// AttachVFPassthrough: the VF goes to the VM through vfio-pci; in
	// switchdev mode its representor joins the network's bridge.
	AttachVFPassthrough = "vf-passthrough"
	// AttachRepresentor: a host netdev (a VF's representor, a veth or a
	// tap the user manages) joins the network's bridge; nothing is passed
	// through.
	AttachRepresentor = "representor"
	// AttachVirtio: a virtio-net NIC whose tap libvirt creates on the
	// network's bridge, with vhost (the VM single-flow guide).
	AttachVirtio = "virtio"
)

// GuestVF names one VF of a physical function.
type GuestVF struct {
	PF    string // netdev name or PCI address
	Index int
	Line  int
}

// Guest is one virtual machine (or one netdev standing in for one).
type Guest struct {
	// Name is the libvirt domain name.
	Name    string
	Network string
	Attach  string
	// VF is the VF passed through, or whose representor joins the bridge.
	VF *GuestVF
	// Port is a host netdev that joins the bridge (representor only).
	Port string
	// MAC, VLAN, Trust and SpoofChk are set on the PF for the VF
	// (vf-passthrough), or on the virtio NIC (MAC only).
	MAC      string
	VLAN     *int
	Trust    *bool
	SpoofChk *bool
	// VCPUs and MemoryMiB size the domain.
	VCPUs     int
	MemoryMiB int
	// CPUs pins the vCPUs (one per vCPU); empty: chosen on NUMANode.
	CPUs []int
	// EmulatorCPUs hosts the emulator and I/O threads and vhost (the VM single-flow guide:
	// emulatorpin apart from the vCPUs); empty: chosen on NUMANode.
	EmulatorCPUs []int
	// NUMANode is the node for vCPUs and memory; nil: the NIC's node.
	NUMANode *int
	// QueueSize is virtio's rx_queue_size and tx_queue_size (default 1024).
	QueueSize int
	// PollUS is vhost's busy-poll time (qemu poll-us; 0: interrupts).
	PollUS int
	// MTU is the guest's MTU; 0: the network's.
	MTU int
	// Kernel, Initrd, Cmdline boot the domain directly; Disk is a disk
	// image. One of Kernel or Disk is needed for a domain definition.
	Kernel, Initrd, Cmdline, Disk string
	// Define runs `virsh define` on apply (default false: the XML is only
	// written to /run/sluice/guests/NAME.xml and shown).
	Define bool
	Line   int
}

// Guest defaults that depend on other keys (the vCPU count on cpus:, the
// queue size on attach:); DefaultGuestMemoryMiB is in defaults.go.
const (
	DefaultGuestVCPUs = 2
	DefaultQueueSize  = 1024 // virtio only: given in applyDefaults
)

// guestMeta is where guest items are, for validation.
type guestMeta struct {
	nets   []item
	guests []item
}

// hostGuestNetwork is one entry of guest-networks: (GuestNetwork).
type hostGuestNetwork struct {
	Name       usableName `yaml:"name"`
	VTEP       ifname     `yaml:"vtep"`
	Bridge     bridgeType `yaml:"bridge" default:"ovs"`
	BridgeName ifname     `yaml:"bridge-name"`
	PageFit    flag       `yaml:"page-fit"`
	MTU        mtu        `yaml:"mtu"`
}

// hostGuest is one entry of guests: (Guest).
type hostGuest struct {
	Name         usableName     `yaml:"name"`
	Network      usableName     `yaml:"network"`
	Attach       attachMode     `yaml:"attach"`
	VF           *hostGuestVF   `yaml:"vf" example:"{pf: enp3s0f0np0, index: 0}"`
	Port         ifname         `yaml:"port"`
	MAC          mac            `yaml:"mac"`
	VLAN         *num[max4094]  `yaml:"vlan"`
	Trust        *flag          `yaml:"trust"`
	SpoofChk     *flag          `yaml:"spoofchk"`
	VCPUs        num[max1024]   `yaml:"vcpus"`
	MemoryMiB    num[max16M]    `yaml:"memory-mib" default:"2048"`
	CPUs         []num[max8191] `yaml:"cpus"`
	EmulatorCPUs []num[max8191] `yaml:"emulator-cpus"`
	NUMANode     *num[max1023]  `yaml:"numa-node"`
	QueueSize    num[max1024]   `yaml:"queue-size"`
	PollUS       num[max100k]   `yaml:"poll-us"`
	MTU          mtu            `yaml:"mtu"`
	Kernel       text           `yaml:"kernel"`
	Initrd       text           `yaml:"initrd"`
	Cmdline      text           `yaml:"cmdline"`
	Disk         text           `yaml:"disk"`
	Define       flag           `yaml:"define"`
}

type hostGuestVF struct {
	PF    portName     `yaml:"pf"`
	Index num[max4095] `yaml:"index"`
}

func (m *guestMeta) applyDefaults(p *parser, h *Host) {
	for i, it := range m.nets {
		n := &h.GuestNetworks[i]
		if !p.Given[it.Path+".bridge-name"] && n.Name != "" {
			n.BridgeName = "br-" + n.Name
		}
	}
	for i, it := range m.guests {
		g := &h.Guests[i]
		if g.VF != nil && !p.Given[it.Path+".vf.index"] {
			g.VF.Index = -1
		}
		if !p.Given[it.Path+".vcpus"] {
			g.VCPUs = DefaultGuestVCPUs
			if len(g.CPUs) > 0 {
				g.VCPUs = len(g.CPUs)
			}
		}
		if !p.Given[it.Path+".queue-size"] && g.Attach == AttachVirtio {
			g.QueueSize = DefaultQueueSize
		}
	}
}

// validate checks the guest sections against each other and against the
// rest of the file; claim reserves device names across the whole file.
func (m *guestMeta) validate(p *parser, h *Host, claim func(string, string, int, string)) {
	nets := map[string]*GuestNetwork{}
	vtepUsed := map[string]string{}
	for i, it := range m.nets {
		n := &h.GuestNetworks[i]
		if n.Name == "" {
			p.Missing(it, "name", "name the network, such as name: tenant-a")
		} else if _, dup := nets[n.Name]; dup {
			p.ErrAt(it, "name", "%s is already a guest network; give each network its own name", show(n.Name))
		} else {
			nets[n.Name] = n
		}
		if len(n.BridgeName) > 15 {
			p.ErrAt(it, "name", "the default bridge name %s is longer than 15 bytes, the longest device name Linux allows; set bridge-name: (such as bridge-name: br0)", n.BridgeName)
		} else {
			l, path := p.At(it, "bridge-name")
			claim(n.BridgeName, path, l, "bridge")
		}
		if n.VTEP == "" {
			p.Missing(it, "vtep", "name the vteps[] entry this network's traffic crosses, such as vtep: vxlan1")
			continue
		}
		l, path := p.At(it, "vtep")
		vi := slices.IndexFunc(h.VTEPs, func(v VTEP) bool { return v.Name == n.VTEP })
		if vi < 0 {
			p.Errorf(l, path, "%s is not one of vteps[]; declare the VTEP (its VNI, local address and remotes) under vteps: and name it here", show(n.VTEP))
			continue
		}
		if first, dup := vtepUsed[n.VTEP]; dup {
			p.Errorf(l, path, "%s already carries guest network %s; one VNI is one segment: give this network its own VTEP (another vni)", n.VTEP, first)
		}
		vtepUsed[n.VTEP] = n.Name
		if v := h.VTEPs[vi]; len(v.Addresses) > 0 {
			p.Errorf(l, path, "vteps[%d] (%s) has addresses, but a VTEP carrying a guest network is a bridge port (an address on it is not reachable); remove its addresses: and give the guests theirs", vi, v.Name)
		}
		if n.PageFit && n.MTU > 0 {
			p.ErrAt(it, "page-fit", "page-fit computes the MTU and mtu: sets it; keep one of them")
		}
	}
	guests := map[string]bool{}
	for i, it := range m.guests {
		g := &h.Guests[i]
		if g.Name == "" {
			p.Missing(it, "name", "name the guest (its libvirt domain), such as name: vm1")
		} else if guests[g.Name] {
			p.ErrAt(it, "name", "%s is already a guest; give each guest its own name", show(g.Name))
		}
		guests[g.Name] = true
		if g.Network == "" {
			p.Missing(it, "network", "name the guest network it joins, such as network: tenant-a")
		} else if nets[g.Network] == nil && !p.Bad[it.Path+".network"] {
			p.ErrAt(it, "network", "%s is not one of guest-networks; declare it there or name one that is", show(g.Network))
		}
		m.validateAttach(p, h, it, g)
		m.validatePlacement(p, it, g)
	}
}

func (m *guestMeta) validateAttach(p *parser, h *Host, it item, g *Guest) {
	only := func(key, attach, fix string) {
		if p.Given[it.Path+"."+key] {
			p.ErrAt(it, key, "only applies to attach: %s; %s", attach, fix)
		}
	}
	switch g.Attach {
	case "":
		p.Missing(it, "attach", "say how the guest's NIC attaches: vf-passthrough (SR-IOV, the ConnectX-6 SR-IOV guide), representor (a host netdev into the bridge) or virtio (tap/vhost, the VM single-flow guide)")
	case AttachVFPassthrough:
		if g.VF == nil {
			p.Missing(it, "vf", "name the VF to pass through, such as vf: {pf: enp3s0f0np0, index: 0}")
		}
		only("port", AttachRepresentor, "a passed-through VF's representor is found through devlink; remove port")
	case AttachRepresentor:
		if (g.VF == nil) == (g.Port == "") {
			p.ErrAt(it, "vf", "attach: representor needs exactly one of vf: (the VF whose representor joins the bridge) or port: (a netdev such as a representor, veth or tap by name)")
		}
	case AttachVirtio:
		only("vf", AttachVFPassthrough+" or "+AttachRepresentor, "a virtio NIC is a tap libvirt creates on the bridge; remove vf")
		only("port", AttachRepresentor, "remove port")
	}
	if g.Attach != AttachVFPassthrough {
		for _, k := range []string{"vlan", "trust", "spoofchk"} {
			only(k, AttachVFPassthrough, "these are VF settings the PF applies; remove "+k)
		}
	}
	if g.Attach != AttachVirtio {
		only("queue-size", AttachVirtio, "remove queue-size")
		only("poll-us", AttachVirtio, "remove poll-us")
	}
	if g.Attach == AttachVirtio && g.QueueSize != 0 && !slices.Contains([]int{256, 512, 1024}, g.QueueSize) {
		p.ErrAt(it, "queue-size", "%d: virtio queues are 256, 512 or 1024 descriptors (QEMU's limit is 1024, the VM single-flow guide uses 1024)", g.QueueSize)
	}
	if vf := g.VF; vf != nil {
		vi := item{Path: it.Path + ".vf", Line: vf.Line}
		if vf.PF == "" {
			p.Missing(vi, "pf", "name the physical function, such as pf: enp3s0f0np0")
		}
		if vf.Index < 0 {
			p.Missing(vi, "index", "say which VF, counting from 0, such as index: 0")
		}
		if g.Attach == AttachVFPassthrough {
			for _, s := range h.SRIOV {
				if s.PF == vf.PF && s.Eswitch == "legacy" {
					p.ErrAt(it, "vf", "%s is in eswitch legacy mode, where a passed-through VF has no representor to join the guest network's bridge; set eswitch: switchdev on sriov[] for %s", vf.PF, vf.PF)
				}
				if s.PF == vf.PF && s.VFs != nil && vf.Index >= *s.VFs {
					p.ErrAt(it, "vf", "VF %d does not exist with vfs: %d on %s; raise vfs or pick a VF from 0 to %d", vf.Index, *s.VFs, vf.PF, *s.VFs-1)
				}
			}
		}
	}
	for i, o := range h.Guests {
		if &h.Guests[i] == g {
			break
		}
		if o.VF != nil && g.VF != nil && o.VF.PF == g.VF.PF && o.VF.Index == g.VF.Index {
			p.ErrAt(it, "vf", "VF %d of %s is already guest %s's; a VF serves one guest", g.VF.Index, g.VF.PF, o.Name)
		}
		if o.Port != "" && o.Port == g.Port {
			p.ErrAt(it, "port", "%s is already guest %s's port", g.Port, o.Name)
		}
	}
}

func (m *guestMeta) validatePlacement(p *parser, it item, g *Guest) {
	if g.VCPUs == 0 && p.Given[it.Path+".vcpus"] {
		p.ErrAt(it, "vcpus", "a guest needs at least one vCPU, such as vcpus: 2")
	}
	if g.MemoryMiB > 0 && g.MemoryMiB < 64 {
		p.ErrAt(it, "memory-mib", "%d MiB is too little for a Linux guest; use 64 or more (2048 is the default)", g.MemoryMiB)
	}
	if len(g.CPUs) > 0 && len(g.CPUs) != g.VCPUs && g.VCPUs > 0 {
		p.ErrAt(it, "cpus", "%d CPUs listed for %d vCPUs; list one host CPU per vCPU (the VM single-flow guide pins each vCPU to its own CPU)", len(g.CPUs), g.VCPUs)
	}
	seen := map[int]bool{}
	for _, c := range g.CPUs {
		if seen[c] {
			p.ErrAt(it, "cpus", "CPU %d is listed twice; each vCPU gets its own host CPU", c)
		}
		seen[c] = true
	}
	for _, c := range g.EmulatorCPUs {
		if seen[c] {
			p.ErrAt(it, "emulator-cpus", "CPU %d also runs a vCPU; keep the emulator and vhost threads apart from the vCPUs (the VM single-flow guide: a vhost thread on a vCPU's CPU halves its time)", c)
		}
	}
	if g.Initrd != "" && g.Kernel == "" {
		p.ErrAt(it, "initrd", "an initrd needs kernel:; add the kernel image or remove initrd")
	}
}

// GuestNetwork returns the network named name (nil: none).
func (h *Host) GuestNetwork(name string) *GuestNetwork {
	for i := range h.GuestNetworks {
		if h.GuestNetworks[i].Name == name {
			return &h.GuestNetworks[i]
		}
	}
	return nil
}

// VTEP returns the VTEP named name (nil: none).
func (h *Host) VTEP(name string) *VTEP {
	for i := range h.VTEPs {
		if h.VTEPs[i].Name == name {
			return &h.VTEPs[i]
		}
	}
	return nil
}

func (g *Guest) String() string { return fmt.Sprintf("guest %s", g.Name) }
