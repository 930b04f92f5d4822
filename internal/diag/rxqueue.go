// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// RxQueue is one receive queue and the interrupt that serves it.
type RxQueue struct {
	Queue int `json:"queue"`
	// IRQ is 0 when no interrupt could be matched to the queue.
	IRQ       int    `json:"irq"`
	IRQName   string `json:"irq_name,omitempty"`
	Affinity  string `json:"affinity,omitempty"`
	Effective string `json:"effective,omitempty"`
	irq       *IRQ
}

// RxInterface is one network interface and its hardware receive queues.
// Stacked devices (VLANs, bonds) are listed with their lower device and
// have no hardware queues.
type RxInterface struct {
	Name     string    `json:"name"`
	PCI      string    `json:"pci,omitempty"`
	Driver   string    `json:"driver,omitempty"`
	NUMANode int       `json:"numa_node"`
	Lower    string    `json:"lower,omitempty"`
	RxQueues int       `json:"rx_queues"`
	Queues   []RxQueue `json:"queues"`
	// IRQPattern is the IRQ name pattern that matched (or, when none did,
	// the ones tried).
	IRQPattern string `json:"irq_pattern,omitempty"`
}

// RxNode groups interfaces by the NUMA node of their device.
type RxNode struct {
	Node       int           `json:"node"`
	CPUs       string        `json:"cpus"`
	NumCPUs    int           `json:"num_cpus"`
	Interfaces []RxInterface `json:"interfaces"`
}

// RxTopology is the answer of `show interface rx-queue topology`.
type RxTopology struct {
	Nodes []RxNode `json:"nodes"`
	// Isolated are the CPUs kept from the scheduler (isolcpus=, nohz_full=).
	Isolated string `json:"isolated"`
	// Housekeeping are the CPUs meant for everything but the data path:
	// the default IRQ affinity (irqaffinity=) when narrower than all CPUs,
	// else the CPUs not isolated. Empty when neither is set.
	Housekeeping string    `json:"housekeeping"`
	Diagnostic   []Finding `json:"diagnostic"`
	Overall      Verdict   `json:"overall"`
	Summary      string    `json:"summary"`
}

// ReadRxTopology reads the receive queues of the PCI network interfaces
// named in only (all of them when empty; their VLANs and other upper
// devices come along) and diagnoses their interrupt pinning.
func ReadRxTopology(fs FS, only []string) (*RxTopology, error) {
	topo, err := ReadTopology(fs)
	if err != nil {
		return nil, err
	}
	irqs, err := readInterrupts(fs)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range only {
		want[n] = true
	}
	rt := &RxTopology{Nodes: []RxNode{}, Diagnostic: []Finding{}}
	seen := map[string]bool{}
	for _, node := range topo.Nodes {
		rn := RxNode{Node: node.Node, CPUs: node.CPUs, NumCPUs: node.NumCPUs}
		for _, dev := range node.Devices {
			virtio := ""
			for _, c := range fs.Names("/sys/bus/pci/devices/" + dev.Address) {
				if strings.HasPrefix(c, "virtio") && fs.Exists("/sys/bus/pci/devices/"+dev.Address+"/"+c+"/net") {
					virtio = c
				}
			}
			for _, name := range dev.Netdevs {
				uppers := upperDevices(fs, name)
				selected := len(want) == 0 || want[name]
				if !selected {
					for _, u := range uppers {
						if want[u] {
							selected = true
						}
					}
				}
				if !selected || seen[name] {
					continue
				}
				seen[name] = true
				ri := readRxInterface(fs, dev, name, virtio, irqs)
				rn.Interfaces = append(rn.Interfaces, ri)
				for _, u := range uppers {
					if seen[u] {
						continue
					}
					seen[u] = true
					rn.Interfaces = append(rn.Interfaces, RxInterface{Name: u, Lower: name, NUMANode: dev.NUMANode, Queues: []RxQueue{}})
				}
			}
		}
		if len(rn.Interfaces) > 0 {
			rt.Nodes = append(rt.Nodes, rn)
		}
	}
	var missing []string
	for _, n := range only {
		if !seen[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("interface %s: not a PCI network interface nor stacked on one in this network namespace (list them with `sluice show interface topology`)", strings.Join(missing, ", "))
	}
	if err := rt.diagnose(fs, topo, irqs); err != nil {
		return nil, err
	}
	return rt, nil
}

// upperDevices lists the devices stacked on name (VLANs, bond masters,
// macvlans): its upper_* links in sysfs.
func upperDevices(fs FS, name string) []string {
	var out []string
	for _, e := range fs.Names(netdevBase(name)) {
		if u, ok := strings.CutPrefix(e, "upper_"); ok {
			out = append(out, u)
		}
	}
	return out
}

func readRxInterface(fs FS, dev PCIDevice, name, virtio string, irqs map[int]*IRQ) RxInterface {
	ri := RxInterface{Name: name, PCI: dev.Address, Driver: dev.Driver, NUMANode: dev.NUMANode, Queues: []RxQueue{}}
	var idx []int
	for _, q := range fs.Names(netdevBase(name) + "/queues") {
		if s, ok := strings.CutPrefix(q, "rx-"); ok {
			if n, err := strconv.Atoi(s); err == nil {
				idx = append(idx, n)
			}
		}
	}
	sort.Ints(idx)
	ri.RxQueues = len(idx)
	got, pattern := matchQueueIRQs(rxQueuePatterns(name, dev.Address, virtio), deviceIRQs(fs, dev.Address, irqs))
	ri.IRQPattern = pattern
	for _, i := range idx {
		q := RxQueue{Queue: i}
		if irq := got[i]; irq != nil {
			q.IRQ, q.IRQName, q.Affinity, q.Effective, q.irq = irq.Num, irq.Name, irq.Affinity, irq.Effective, irq
		}
		ri.Queues = append(ri.Queues, q)
	}
	return ri
}

// cpuOf is the single CPU a queue's IRQ runs on: its affinity when pinned
// to one CPU, else its effective affinity when that is one CPU; -1 if
// neither.
func (q *RxQueue) cpuOf() int {
	if q.irq == nil {
		return -1
	}
	for _, s := range []CPUSet{q.irq.aff, q.irq.eff} {
		if len(s) == 1 {
			return s.Sorted()[0]
		}
	}
	return -1
}

func (q *RxQueue) label() string { return fmt.Sprintf("rx-%d irq:%d", q.Queue, q.IRQ) }

// readCPUFile reads a CPU list file; a missing file is the empty set.
func readCPUFile(fs FS, p string) (CPUSet, error) {
	s, err := fs.ReadString(p)
	if err != nil {
		return CPUSet{}, nil
	}
	set, err := ParseCPUList(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return set, nil
}

// cpuContext is what the host says about CPU roles.
type cpuContext struct {
	online, isolated, housekeeping CPUSet
	hkSource                       string
}

func readCPUContext(fs FS) (*cpuContext, error) {
	c := &cpuContext{}
	var err error
	if c.online, err = onlineCPUs(fs); err != nil {
		return nil, err
	}
	iso, err := readCPUFile(fs, "/sys/devices/system/cpu/isolated")
	if err != nil {
		return nil, err
	}
	nohz, err := readCPUFile(fs, "/sys/devices/system/cpu/nohz_full")
	if err != nil {
		return nil, err
	}
	c.isolated = iso.Union(nohz)
	c.housekeeping = CPUSet{}
	if s, err := fs.ReadString("/proc/irq/default_smp_affinity"); err == nil {
		def, err := ParseCPUMask(s)
		if err != nil {
			return nil, fmt.Errorf("/proc/irq/default_smp_affinity: %w", err)
		}
		def = def.Intersect(c.online)
		if len(def) > 0 && len(def) < len(c.online) {
			c.housekeeping, c.hkSource = def, "default IRQ affinity"
		}
	}
	if len(c.housekeeping) == 0 && len(c.isolated) > 0 {
		c.housekeeping, c.hkSource = c.online.Minus(c.isolated), "CPUs not isolated"
	}
	return c, nil
}

func (rt *RxTopology) add(v Verdict, subject, format string, a ...any) {
	rt.Diagnostic = append(rt.Diagnostic, Finding{Verdict: v, Subject: subject, Message: fmt.Sprintf(format, a...)})
}

// diagnose grades the layout: per interface, pinning and NUMA locality;
// then, over the data-path interfaces, distinct CPUs per queue, queues on
// isolated CPUs and no overlap with housekeeping. An interface whose queues
// all sit on housekeeping CPUs is a management port and only noted.
func (rt *RxTopology) diagnose(fs FS, topo *Topology, irqs map[int]*IRQ) error {
	cc, err := readCPUContext(fs)
	if err != nil {
		return err
	}
	rt.Isolated, rt.Housekeeping = cc.isolated.String(), cc.housekeeping.String()
	byCPU := map[int][]queueOwner{}
	queueIRQ := map[int]bool{}
	var dataIfaces []*RxInterface
	for ni := range rt.Nodes {
		for ii := range rt.Nodes[ni].Interfaces {
			ri := &rt.Nodes[ni].Interfaces[ii]
			if ri.Lower != "" || ri.RxQueues == 0 {
				continue
			}
			var qs []*RxQueue
			all := CPUSet{}
			for qi := range ri.Queues {
				q := &ri.Queues[qi]
				if q.irq != nil {
					qs = append(qs, q)
					all = all.Union(q.irq.aff)
				}
			}
			if len(qs) == 0 {
				rt.add(Warn, ri.Name, "no rx queue IRQ found in /proc/interrupts (looked for %s): cannot check pinning", ri.IRQPattern)
				continue
			}
			if len(cc.housekeeping) > 0 && all.SubsetOf(cc.housekeeping) {
				rt.add(Info, ri.Name, "rx queues on housekeeping CPUs %s: a management port, not checked as a data-path port", all)
				continue
			}
			dataIfaces = append(dataIfaces, ri)
			var problems []Finding
			for qi := range ri.Queues {
				q := &ri.Queues[qi]
				if q.irq == nil {
					problems = append(problems, Finding{Warn, ri.Name, fmt.Sprintf("rx-%d has no IRQ in /proc/interrupts (looked for %s)", q.Queue, ri.IRQPattern)})
					continue
				}
				queueIRQ[q.IRQ] = true
				if len(q.irq.aff) > 1 {
					problems = append(problems, Finding{Warn, ri.Name, fmt.Sprintf("%s not pinned to one CPU (affinity %s)", q.label(), q.Affinity)})
				}
				if c := q.cpuOf(); c >= 0 {
					byCPU[c] = append(byCPU[c], queueOwner{ri.Name, q})
				}
				node := topo.Node(ri.NUMANode)
				if ri.NUMANode < 0 || node == nil {
					continue
				}
				if !q.irq.eff.SubsetOf(node.cpuset) {
					remote := nodesOf(topo, q.irq.eff.Minus(node.cpuset))
					problems = append(problems, Finding{Fail, ri.Name, fmt.Sprintf("%s on cpu %s (NUMA node %s), device is on NUMA node %d", q.label(), q.Effective, remote, ri.NUMANode)})
				} else if !q.irq.aff.SubsetOf(node.cpuset) {
					problems = append(problems, Finding{Warn, ri.Name, fmt.Sprintf("%s affinity %s reaches beyond NUMA node %d (cpus %s)", q.label(), q.Affinity, ri.NUMANode, node.CPUs)})
				}
			}
			if len(problems) == 0 {
				if n := topo.Node(ri.NUMANode); ri.NUMANode < 0 || n == nil {
					rt.add(OK, ri.Name, "pinning correct; NUMA node unknown (the firmware reports none)")
				} else {
					rt.add(OK, ri.Name, "pinning and NUMA locality correct")
				}
			}
			rt.Diagnostic = append(rt.Diagnostic, problems...)
		}
	}
	if len(dataIfaces) > 0 {
		rt.checkDistinct(byCPU)
		rt.checkIsolation(cc, dataIfaces)
		rt.checkHousekeeping(cc, dataIfaces, irqs, queueIRQ, byCPU)
	}
	rt.Overall = worst(rt.Diagnostic)
	switch rt.Overall {
	case Fail:
		rt.Summary = "rx queue affinity configuration has errors"
	case Warn:
		rt.Summary = "rx queue affinity configuration is suboptimal"
	default:
		rt.Summary = "rx queue affinity configuration is optimal"
	}
	return nil
}

func nodesOf(topo *Topology, cpus CPUSet) string {
	var ns []string
	for _, n := range topo.Nodes {
		if len(cpus.Intersect(n.cpuset)) > 0 {
			ns = append(ns, strconv.Itoa(n.Node))
		}
	}
	if len(ns) == 0 {
		return "?"
	}
	return strings.Join(ns, ",")
}

// queueOwner is a queue and its interface's name.
type queueOwner struct {
	iface string
	q     *RxQueue
}

func (o queueOwner) String() string { return fmt.Sprintf("%s rx-%d", o.iface, o.q.Queue) }

func joinOwners(owners []queueOwner) string {
	s := make([]string, len(owners))
	for i, o := range owners {
		s[i] = o.String()
	}
	return strings.Join(s, ", ")
}

func (rt *RxTopology) checkDistinct(byCPU map[int][]queueOwner) {
	shared := false
	for _, c := range slices.Sorted(maps.Keys(byCPU)) {
		if owners := byCPU[c]; len(owners) > 1 {
			shared = true
			rt.add(Warn, "", "cpu %d serves %d rx queues: %s (one queue per CPU keeps them from queueing behind each other)", c, len(owners), joinOwners(owners))
		}
	}
	if !shared {
		rt.add(OK, "", "all rx queue IRQs use distinct CPUs")
	}
}

func (rt *RxTopology) checkIsolation(cc *cpuContext, ifaces []*RxInterface) {
	if len(cc.isolated) == 0 {
		rt.add(Info, "", "no isolated CPUs (isolcpus=/nohz_full= unset): rx queues share their CPUs with ordinary tasks")
		return
	}
	ok := true
	for _, ri := range ifaces {
		cpus := CPUSet{}
		for _, q := range ri.Queues {
			if q.irq != nil {
				cpus = cpus.Union(q.irq.aff.Minus(cc.isolated))
			}
		}
		if len(cpus) > 0 {
			ok = false
			rt.add(Warn, ri.Name, "rx queues on CPUs %s that are not isolated (isolated: %s)", cpus, cc.isolated)
		}
	}
	if ok {
		rt.add(OK, "", "all rx queues on isolated CPUs (isolated: %s)", cc.isolated)
	}
}

func (rt *RxTopology) checkHousekeeping(cc *cpuContext, ifaces []*RxInterface, irqs map[int]*IRQ, queueIRQ map[int]bool, byCPU map[int][]queueOwner) {
	if len(cc.housekeeping) == 0 {
		rt.add(Info, "", "no housekeeping CPUs set (irqaffinity= and isolcpus= unset): new IRQs may land on rx queue CPUs")
		return
	}
	ok := true
	for _, ri := range ifaces {
		for qi := range ri.Queues {
			q := &ri.Queues[qi]
			if q.irq == nil {
				continue
			}
			if hk := q.irq.aff.Intersect(cc.housekeeping); len(hk) > 0 {
				ok = false
				rt.add(Warn, ri.Name, "%s may run on housekeeping cpu %s (housekeeping: %s, the %s)", q.label(), hk, cc.housekeeping, cc.hkSource)
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(irqs)) {
		irq := irqs[n]
		if queueIRQ[n] || len(irq.eff) == 0 {
			continue
		}
		var on []queueOwner
		for _, c := range irq.eff.Sorted() {
			on = append(on, byCPU[c]...)
		}
		if len(on) > 0 && !slices.ContainsFunc(irq.eff.Sorted(), func(c int) bool { _, serves := byCPU[c]; return !serves }) {
			ok = false
			rt.add(Warn, fmt.Sprintf("irq %d", n), "%s runs on cpu %s, which serves %s: move it to the housekeeping CPUs %s", irq.Name, irq.Effective, joinOwners(on), cc.housekeeping)
		}
	}
	if ok {
		rt.add(OK, "", "no housekeeping overlap (housekeeping CPUs %s: the %s)", cc.housekeeping, cc.hkSource)
	}
}
