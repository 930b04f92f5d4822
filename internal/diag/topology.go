// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// PCIDevice is one PCI network device.
type PCIDevice struct {
	Address string `json:"address"`
	// NUMANode is what sysfs reports: -1 when the firmware does not say.
	NUMANode int    `json:"numa_node"`
	VendorID string `json:"vendor_id"`
	Vendor   string `json:"vendor"`
	DeviceID string `json:"device_id"`
	Model    string `json:"model"`
	Class    string `json:"class"`
	Driver   string `json:"driver"`
	// Netdevs are the device's network interfaces in this network
	// namespace (a VF moved elsewhere has none here).
	Netdevs []string `json:"netdevs"`
}

// NUMANode is a NUMA node and the network devices attached to it.
type NUMANode struct {
	// Node is the node number; -1 groups devices whose node is unknown on
	// a multi-node host.
	Node    int         `json:"node"`
	CPUs    string      `json:"cpus"`
	NumCPUs int         `json:"num_cpus"`
	Devices []PCIDevice `json:"devices"`
	cpuset  CPUSet
}

// Topology is the PCI network devices by NUMA node.
type Topology struct {
	Nodes []NUMANode `json:"nodes"`
	// PCIIDs is the pci.ids file the names come from ("" when none).
	PCIIDs string `json:"pci_ids"`
}

// Node returns the node numbered n, or nil.
func (t *Topology) Node(n int) *NUMANode {
	for i := range t.Nodes {
		if t.Nodes[i].Node == n {
			return &t.Nodes[i]
		}
	}
	return nil
}

// Device returns the PCI device owning netdev name, or nil.
func (t *Topology) Device(name string) *PCIDevice {
	for i := range t.Nodes {
		for j := range t.Nodes[i].Devices {
			for _, n := range t.Nodes[i].Devices[j].Netdevs {
				if n == name {
					return &t.Nodes[i].Devices[j]
				}
			}
		}
	}
	return nil
}

// isNetworkDevice: PCI class 0x02 (network controller: Ethernet,
// InfiniBand, other), or anything with a netdev.
func isNetworkDevice(class string, netdevs []string) bool {
	return strings.HasPrefix(class, "0x02") || len(netdevs) > 0
}

// numaNodes returns the online nodes and their CPUs. A kernel without NUMA
// has no /sys/devices/system/node: it is one node 0 with every online CPU.
func numaNodes(fs FS) (map[int]CPUSet, error) {
	nodes := map[int]CPUSet{}
	for _, name := range fs.Names("/sys/devices/system/node") {
		num, ok := strings.CutPrefix(name, "node")
		n, err := strconv.Atoi(num)
		if !ok || err != nil {
			continue
		}
		s, err := fs.ReadString("/sys/devices/system/node/" + name + "/cpulist")
		if err != nil {
			return nil, fmt.Errorf("NUMA node %d: %w", n, err)
		}
		set, err := ParseCPUList(s)
		if err != nil {
			return nil, fmt.Errorf("/sys/devices/system/node/%s/cpulist: %w", name, err)
		}
		nodes[n] = set
	}
	if len(nodes) == 0 {
		online, err := onlineCPUs(fs)
		if err != nil {
			return nil, err
		}
		nodes[0] = online
	}
	return nodes, nil
}

func onlineCPUs(fs FS) (CPUSet, error) {
	s, err := fs.ReadString("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("online CPUs: %w", err)
	}
	return ParseCPUList(s)
}

// pciNetdevs lists a PCI device's network interfaces: net/* directly, or
// under a virtio child device (virtio-net).
func pciNetdevs(fs FS, dev string) []string {
	base := "/sys/bus/pci/devices/" + dev
	names := fs.Names(base + "/net")
	for _, child := range fs.Names(base) {
		if strings.HasPrefix(child, "virtio") {
			names = append(names, fs.Names(base+"/"+child+"/net")...)
		}
	}
	sort.Strings(names)
	return names
}

// ReadTopology walks /sys/bus/pci/devices for network devices and groups
// them by NUMA node, names from the system's pci.ids.
func ReadTopology(fs FS) (*Topology, error) {
	nodes, err := numaNodes(fs)
	if err != nil {
		return nil, err
	}
	var devs []PCIDevice
	vendors := map[string]bool{}
	for _, addr := range fs.Names("/sys/bus/pci/devices") {
		base := "/sys/bus/pci/devices/" + addr
		class, _ := fs.ReadString(base + "/class")
		netdevs := pciNetdevs(fs, addr)
		if !isNetworkDevice(class, netdevs) {
			continue
		}
		d := PCIDevice{Address: addr, Class: class, Netdevs: netdevs, NUMANode: -1}
		if n, err := fs.ReadInt(base + "/numa_node"); err == nil {
			d.NUMANode = int(n)
		}
		v, _ := fs.ReadString(base + "/vendor")
		id, _ := fs.ReadString(base + "/device")
		d.VendorID = strings.ToLower(strings.TrimPrefix(v, "0x"))
		d.DeviceID = strings.ToLower(strings.TrimPrefix(id, "0x"))
		d.Driver = fs.LinkBase(base + "/driver")
		vendors[d.VendorID] = true
		devs = append(devs, d)
	}
	names := loadPCINames(fs, vendors)
	t := &Topology{PCIIDs: names.source}
	byNode := map[int][]PCIDevice{}
	for _, d := range devs {
		d.Vendor = names.vendor(d.VendorID)
		d.Model = names.device(d.VendorID, d.DeviceID)
		n := d.NUMANode
		if _, ok := nodes[n]; !ok {
			n = -1
			if len(nodes) == 1 {
				// One node: the firmware's -1 can only mean that one.
				for only := range nodes {
					n = only
				}
			}
		}
		byNode[n] = append(byNode[n], d)
	}
	ids := make([]int, 0, len(nodes))
	for n := range nodes {
		ids = append(ids, n)
	}
	sort.Ints(ids)
	if _, ok := byNode[-1]; ok {
		ids = append(ids, -1)
	}
	for _, n := range ids {
		set, devs := nodes[n], byNode[n]
		if devs == nil {
			devs = []PCIDevice{}
		}
		t.Nodes = append(t.Nodes, NUMANode{Node: n, CPUs: set.String(), NumCPUs: len(set), Devices: devs, cpuset: set})
	}
	return t, nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// netdevBase is the sysfs directory of a network interface.
func netdevBase(name string) string { return path.Join("/sys/class/net", name) }

var pciAddrRe = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// PCIAddress returns the PCI address of the device behind a network
// interface ("" for virtual interfaces): the last PCI address on the path
// its sysfs entry resolves to (virtio-net sits one level below).
func (fs FS) PCIAddress(netdev string) string {
	real, err := filepath.EvalSymlinks(fs.path(netdevBase(netdev)))
	if err != nil {
		return ""
	}
	addr := ""
	for _, el := range strings.Split(real, "/") {
		if pciAddrRe.MatchString(el) {
			addr = el
		}
	}
	return addr
}
