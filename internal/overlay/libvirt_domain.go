// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"sluice/internal/config"
	"sluice/internal/diag"
)

// The domain definition is written with encoding/xml over the few libvirt
// elements sluice sets. libvirt.org/go/libvirtxml would be the library of
// choice, but the Go module proxy refuses it here (403, "not available"),
// and the elements below are stable parts of libvirt's schema; the tests
// run virt-xml-validate on what this produces.

type domainXML struct {
	XMLName   xml.Name     `xml:"domain"`
	Type      string       `xml:"type,attr"`
	QemuNS    string       `xml:"xmlns:qemu,attr,omitempty"`
	Name      string       `xml:"name"`
	Memory    memoryXML    `xml:"memory"`
	VCPU      vcpuXML      `xml:"vcpu"`
	IOThreads int          `xml:"iothreads,omitempty"`
	CPUTune   *cputuneXML  `xml:"cputune,omitempty"`
	NUMATune  *numatuneXML `xml:"numatune,omitempty"`
	OS        osXML        `xml:"os"`
	Features  struct {
		ACPI *struct{} `xml:"acpi"`
	} `xml:"features"`
	CPU *struct {
		Mode string `xml:"mode,attr"`
	} `xml:"cpu,omitempty"`
	Devices  devicesXML   `xml:"devices"`
	QemuCmd  *qemuCmdXML  `xml:"qemu:commandline,omitempty"`
	QemuCaps *qemuCapsXML `xml:"qemu:capabilities,omitempty"`
}

type memoryXML struct {
	Unit  string `xml:"unit,attr"`
	Value int    `xml:",chardata"`
}

type vcpuXML struct {
	Placement string `xml:"placement,attr"`
	Value     int    `xml:",chardata"`
}

type cputuneXML struct {
	VCPUPins    []vcpuPinXML `xml:"vcpupin"`
	EmulatorPin *cpusetXML   `xml:"emulatorpin,omitempty"`
	IOThreadPin []ioPinXML   `xml:"iothreadpin"`
}

type vcpuPinXML struct {
	VCPU   int    `xml:"vcpu,attr"`
	CPUSet string `xml:"cpuset,attr"`
}

type cpusetXML struct {
	CPUSet string `xml:"cpuset,attr"`
}

type ioPinXML struct {
	IOThread int    `xml:"iothread,attr"`
	CPUSet   string `xml:"cpuset,attr"`
}

type numatuneXML struct {
	Memory struct {
		Mode    string `xml:"mode,attr"`
		Nodeset string `xml:"nodeset,attr"`
	} `xml:"memory"`
}

type osXML struct {
	Type struct {
		Arch    string `xml:"arch,attr"`
		Machine string `xml:"machine,attr"`
		Value   string `xml:",chardata"`
	} `xml:"type"`
	Kernel  string `xml:"kernel,omitempty"`
	Initrd  string `xml:"initrd,omitempty"`
	Cmdline string `xml:"cmdline,omitempty"`
}

type devicesXML struct {
	Disks      []diskXML    `xml:"disk"`
	Interfaces []ifaceXML   `xml:"interface"`
	Hostdevs   []hostdevXML `xml:"hostdev"`
	Serial     *struct {
		Type string `xml:"type,attr"`
	} `xml:"serial,omitempty"`
	Console *struct {
		Type string `xml:"type,attr"`
	} `xml:"console,omitempty"`
}

type diskXML struct {
	Type   string `xml:"type,attr"`
	Device string `xml:"device,attr"`
	Driver struct {
		Name string `xml:"name,attr"`
		Type string `xml:"type,attr"`
	} `xml:"driver"`
	Source struct {
		File string `xml:"file,attr"`
	} `xml:"source"`
	Target struct {
		Dev string `xml:"dev,attr"`
		Bus string `xml:"bus,attr"`
	} `xml:"target"`
}

type ifaceXML struct {
	Type string `xml:"type,attr"`
	MAC  *struct {
		Address string `xml:"address,attr"`
	} `xml:"mac,omitempty"`
	Source struct {
		Bridge string `xml:"bridge,attr"`
	} `xml:"source"`
	VirtualPort *struct {
		Type string `xml:"type,attr"`
	} `xml:"virtualport,omitempty"`
	Model struct {
		Type string `xml:"type,attr"`
	} `xml:"model"`
	Driver struct {
		Name        string `xml:"name,attr"`
		Queues      int    `xml:"queues,attr,omitempty"`
		RxQueueSize int    `xml:"rx_queue_size,attr,omitempty"`
		TxQueueSize int    `xml:"tx_queue_size,attr,omitempty"`
	} `xml:"driver"`
	MTU *struct {
		Size int `xml:"size,attr"`
	} `xml:"mtu,omitempty"`
	Alias *struct {
		Name string `xml:"name,attr"`
	} `xml:"alias,omitempty"`
}

type hostdevXML struct {
	Mode    string `xml:"mode,attr"`
	Type    string `xml:"type,attr"`
	Managed string `xml:"managed,attr"`
	Source  struct {
		Address pciAddrXML `xml:"address"`
	} `xml:"source"`
}

type pciAddrXML struct {
	Domain   string `xml:"domain,attr"`
	Bus      string `xml:"bus,attr"`
	Slot     string `xml:"slot,attr"`
	Function string `xml:"function,attr"`
}

type qemuCmdXML struct {
	Args []struct {
		Value string `xml:"value,attr"`
	} `xml:"qemu:arg"`
}

type qemuCapsXML struct {
	Del []struct {
		Capability string `xml:"capability,attr"`
	} `xml:"qemu:del"`
}

// Domain is one guest's libvirt definition and what sluice decided for it.
type Domain struct {
	x domainXML
	// VCPUCPUs are the host CPUs the vCPUs are pinned to; EmulatorCPUs
	// hold the emulator, I/O and vhost threads.
	VCPUCPUs, EmulatorCPUs []int
	NUMANode               int
	// GuestMTU is the MTU the guest's NIC must have.
	GuestMTU int
	// Notes explain choices and what must be set inside the guest.
	Notes []string
}

// kvmAvailable reports whether /dev/kvm exists. It is a variable because
// a /dev/kvm can exist and still run no guest (this project's test host
// has one that stops every guest with "KVM internal error"): the boot test
// sets it to report false there.
var kvmAvailable = func() bool {
	_, err := os.Stat("/dev/kvm")
	return err == nil
}

// domainType is kvm where /dev/kvm exists, qemu (TCG) elsewhere: the
// tests boot guests without KVM.
func domainType() string {
	if kvmAvailable() {
		return "kvm"
	}
	return "qemu"
}

// NewDomain builds guest g's domain: vCPUs pinned to CPUs of the NIC's
// NUMA node (the VM single-flow guide), the emulator and vhost threads on other CPUs of
// that node, memory bound to the node, virtio queues of 1024, vhost poll-us
// through QEMU's command line, the MTU on the interface where libvirt can
// set it. topo may be nil (then the file's cpus and numa-node are used, or
// no pinning).
func NewDomain(g *config.Guest, n *config.GuestNetwork, vfs map[string]VFLive, mtu int, topo *diag.Topology) (*Domain, error) {
	d := &Domain{NUMANode: -1, GuestMTU: mtu}
	x := &d.x
	x.Type = domainType()
	x.Name = g.Name
	x.Memory = memoryXML{Unit: "MiB", Value: g.MemoryMiB}
	x.VCPU = vcpuXML{Placement: "static", Value: g.VCPUs}
	x.OS.Type.Arch, x.OS.Type.Machine, x.OS.Type.Value = "x86_64", "pc", "hvm"
	x.OS.Kernel, x.OS.Initrd, x.OS.Cmdline = g.Kernel, g.Initrd, g.Cmdline
	x.Features.ACPI = &struct{}{}
	if x.Type == "kvm" {
		x.CPU = &struct {
			Mode string `xml:"mode,attr"`
		}{Mode: "host-passthrough"}
	} else {
		d.Notes = append(d.Notes, "no /dev/kvm here: domain type qemu (TCG), for tests only")
	}
	if g.Disk != "" {
		var dk diskXML
		dk.Type, dk.Device = "file", "disk"
		dk.Driver.Name, dk.Driver.Type = "qemu", "qcow2"
		if strings.HasSuffix(g.Disk, ".raw") || strings.HasSuffix(g.Disk, ".img") {
			dk.Driver.Type = "raw"
		}
		dk.Source.File = g.Disk
		dk.Target.Dev, dk.Target.Bus = "vda", "virtio"
		x.Devices.Disks = append(x.Devices.Disks, dk)
	}
	x.Devices.Serial = &struct {
		Type string `xml:"type,attr"`
	}{Type: "pty"}
	x.Devices.Console = &struct {
		Type string `xml:"type,attr"`
	}{Type: "pty"}
	if err := d.place(g, topo); err != nil {
		return nil, err
	}
	switch g.Attach {
	case config.AttachVirtio:
		var ifc ifaceXML
		ifc.Type = "bridge"
		if g.MAC != "" {
			ifc.MAC = &struct {
				Address string `xml:"address,attr"`
			}{Address: g.MAC}
		}
		ifc.Source.Bridge = n.BridgeName
		if n.Bridge == config.BridgeOVS {
			ifc.VirtualPort = &struct {
				Type string `xml:"type,attr"`
			}{Type: "openvswitch"}
		}
		ifc.Model.Type = "virtio"
		ifc.Driver.Name = "vhost"
		ifc.Driver.RxQueueSize, ifc.Driver.TxQueueSize = g.QueueSize, g.QueueSize
		if g.VCPUs > 1 {
			ifc.Driver.Queues = g.VCPUs
		}
		if mtu > 0 {
			ifc.MTU = &struct {
				Size int `xml:"size,attr"`
			}{Size: mtu}
		}
		x.Devices.Interfaces = append(x.Devices.Interfaces, ifc)
		if g.PollUS > 0 {
			// libvirt has no element for vhost's poll-us (the VM single-flow guide); QEMU
			// takes it as a netdev property. hostnet0 is libvirt's alias
			// for the first interface's backend. -set reaches only a
			// -netdev given in QEMU's option syntax: libvirt 8+ passes
			// JSON to a QEMU that takes it, and QEMU then refuses the
			// domain ("there is no netdev hostnet0 defined", seen with
			// libvirt 9.0 and QEMU 7.2 by TestLibvirtGuestBoots), so the
			// domain masks the capability that selects JSON.
			x.QemuNS = "http://libvirt.org/schemas/domain/qemu/1.0"
			x.QemuCaps = &qemuCapsXML{Del: []struct {
				Capability string `xml:"capability,attr"`
			}{{Capability: "netdev.json"}}}
			d.Notes = append(d.Notes, "poll-us goes to QEMU with -set netdev.hostnet0.poll-us, which needs libvirt's non-JSON -netdev: the domain deletes QEMU capability netdev.json (libvirt marks the domain tainted: custom-caps)")
			x.QemuCmd = &qemuCmdXML{}
			for _, a := range []string{"-set", "netdev.hostnet0.poll-us=" + strconv.Itoa(g.PollUS)} {
				x.QemuCmd.Args = append(x.QemuCmd.Args, struct {
					Value string `xml:"value,attr"`
				}{a})
			}
		}
	case config.AttachVFPassthrough:
		vf := vfs[vfKey(g.VF.PF, g.VF.Index)]
		if vf.PCI == "" {
			d.Notes = append(d.Notes, "the VF does not exist yet: its hostdev is left out until apply runs again")
			break
		}
		var h hostdevXML
		h.Mode, h.Type, h.Managed = "subsystem", "pci", "no" // sluice binds vfio-pci itself, and teardown unbinds it
		a, err := pciAddr(vf.PCI)
		if err != nil {
			return nil, err
		}
		h.Source.Address = a
		x.Devices.Hostdevs = append(x.Devices.Hostdevs, h)
		if mtu > 0 {
			d.Notes = append(d.Notes, fmt.Sprintf("a passed-through VF takes no MTU from libvirt: inside the guest set `ip link set dev <nic> mtu %d` (or netplan/DHCP option 26)", mtu))
		}
	case config.AttachRepresentor:
		d.Notes = append(d.Notes, "attach: representor has no guest NIC in the domain (the port stays on the host)")
	}
	return d, nil
}

// place pins vCPUs and the emulator threads and binds memory.
func (d *Domain) place(g *config.Guest, topo *diag.Topology) error {
	node := -1
	if g.NUMANode != nil {
		node = *g.NUMANode
	} else if topo != nil && g.VF != nil {
		if dev := topo.Device(g.VF.PF); dev != nil {
			node = dev.NUMANode
		}
	}
	var nodeCPUs []int
	if topo != nil && node >= 0 {
		if nn := topo.Node(node); nn != nil {
			s, err := diag.ParseCPUList(nn.CPUs)
			if err == nil {
				nodeCPUs = s.Sorted()
			}
		}
	}
	vcpus := g.CPUs
	emu := g.EmulatorCPUs
	if len(vcpus) == 0 && len(nodeCPUs) > g.VCPUs {
		// The last CPUs of the node for vCPUs, the first free one for the
		// emulator: CPU 0 of a node usually takes most housekeeping.
		vcpus = nodeCPUs[len(nodeCPUs)-g.VCPUs:]
		d.Notes = append(d.Notes, fmt.Sprintf("vCPUs pinned to CPUs %s of NUMA node %d (the NIC's); consider isolcpus=%s on the host's kernel command line (the VM single-flow guide)", joinInts(vcpus), node, joinInts(vcpus)))
	}
	if len(emu) == 0 && len(vcpus) > 0 {
		for _, c := range nodeCPUs {
			if !slices.Contains(vcpus, c) {
				emu = []int{c}
				break
			}
		}
	}
	d.VCPUCPUs, d.EmulatorCPUs, d.NUMANode = vcpus, emu, node
	if len(vcpus) == 0 && len(emu) == 0 && node < 0 {
		d.Notes = append(d.Notes, "no NUMA node known for the NIC and no cpus: given: vCPUs are not pinned")
		return nil
	}
	ct := &cputuneXML{}
	for i, c := range vcpus {
		ct.VCPUPins = append(ct.VCPUPins, vcpuPinXML{VCPU: i, CPUSet: strconv.Itoa(c)})
	}
	if len(emu) > 0 {
		d.x.IOThreads = 1
		ct.EmulatorPin = &cpusetXML{CPUSet: joinInts(emu)}
		ct.IOThreadPin = []ioPinXML{{IOThread: 1, CPUSet: joinInts(emu)}}
	}
	d.x.CPUTune = ct
	if node >= 0 {
		d.x.NUMATune = &numatuneXML{}
		d.x.NUMATune.Memory.Mode, d.x.NUMATune.Memory.Nodeset = "strict", strconv.Itoa(node)
	}
	return nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func pciAddr(a string) (pciAddrXML, error) {
	var dom, bus, slot, fn int
	if _, err := fmt.Sscanf(a, "%x:%x:%x.%x", &dom, &bus, &slot, &fn); err != nil {
		return pciAddrXML{}, fmt.Errorf("%s is not a PCI address", a)
	}
	return pciAddrXML{Domain: fmt.Sprintf("0x%04x", dom), Bus: fmt.Sprintf("0x%02x", bus), Slot: fmt.Sprintf("0x%02x", slot), Function: fmt.Sprintf("0x%x", fn)}, nil
}

// XML is the domain definition, indented.
func (d *Domain) XML() (string, error) {
	b, err := xml.MarshalIndent(&d.x, "", "  ")
	if err != nil {
		return "", fmt.Errorf("domain XML: %w", err)
	}
	return string(b) + "\n", nil
}

func runVirsh(args ...string) (string, error) {
	out, err := exec.Command("virsh", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
