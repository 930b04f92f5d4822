//go:build ignore

// gen_cx7 writes the fixture tree testdata/cx7: the sysfs and procfs of
// the ConnectX-7 benchmark's gateway, a two-socket Xeon (NUMA 0: CPUs 0-23, NUMA 1: 24-47)
// booted with isolcpus=managed_irq,domain,4-23 nohz_full=4-23
// irqaffinity=0-3, with
//
//	0000:31:00.0  ConnectX-7  p0  (NUMA 0), 10 rx queues pinned to CPUs 4-13
//	0000:31:00.1  ConnectX-7  p1  (NUMA 0), 10 rx queues pinned to CPUs 14-23
//	0000:4b:00.0  I350        enp75s0f0 (NUMA 0), management, default affinity
//	0000:4b:00.1  I350        enp75s0f1 (NUMA 0), management, default affinity
//	0000:b1:00.0  ConnectX-7  p2  (NUMA 1), 10 rx queues on CPUs 24-33
//	0000:b1:00.1  ConnectX-7  p3  (NUMA 1), 10 rx queues on CPUs 34-43
//
// plus VLANs p0.502 and p1.504, an NVMe drive and a host bridge (neither is
// a network device). IRQ numbers of p0/p1 are the ConnectX-7 benchmark's.
//
// Regenerate with: go run ./internal/diag/testdata/gen_cx7.go
package main

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const root = "internal/diag/testdata/cx7"
const ncpu = 48

func write(p, content string) {
	p = filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		log.Fatal(err)
	}
}

func symlink(target, p string) {
	p = filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		log.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		log.Fatal(err)
	}
}

type irq struct {
	num      int
	chip     string
	name     string
	aff, eff string
	countCPU int // the CPU that counted this IRQ's interrupts
}

var irqs []irq

type nic struct {
	pci, vendor, device, class, driver string
	numa                               int
	netdev                             string
	rxq                                int
	uppers                             []string
}

func addNIC(n nic) {
	base := "sys/bus/pci/devices/" + n.pci
	write(base+"/vendor", "0x"+n.vendor+"\n")
	write(base+"/device", "0x"+n.device+"\n")
	write(base+"/class", n.class+"\n")
	write(base+"/numa_node", fmt.Sprintf("%d\n", n.numa))
	symlink("../../../bus/pci/drivers/"+n.driver, base+"/driver")
	if n.netdev == "" {
		return
	}
	nd := base + "/net/" + n.netdev
	for q := 0; q < n.rxq; q++ {
		write(fmt.Sprintf("%s/queues/rx-%d/rps_cpus", nd, q), "00000000,00000000\n")
		write(fmt.Sprintf("%s/queues/tx-%d/xps_cpus", nd, q), "00000000,00000000\n")
	}
	write(nd+"/mtu", "1500\n")
	write(nd+"/operstate", "up\n")
	symlink("../../bus/pci/devices/"+n.pci+"/net/"+n.netdev, "sys/class/net/"+n.netdev)
	for _, u := range n.uppers {
		symlink("../../../../../../class/net/"+u, nd+"/upper_"+u)
		write("sys/devices/virtual/net/"+u+"/queues/rx-0/rps_cpus", "00000000,00000000\n")
		write("sys/devices/virtual/net/"+u+"/mtu", "1500\n")
		symlink("../../../../bus/pci/devices/"+n.pci+"/net/"+n.netdev, "sys/devices/virtual/net/"+u+"/lower_"+n.netdev)
		symlink("../../devices/virtual/net/"+u, "sys/class/net/"+u)
	}
}

func msi(pci string, nums ...int) {
	for _, n := range nums {
		write(fmt.Sprintf("sys/bus/pci/devices/%s/msi_irqs/%d", pci, n), "msix\n")
	}
}

// mlx5 adds the async IRQ and one completion IRQ per channel, pinned one
// per CPU from first.
func mlx5(pci string, async int, comps []int, first int, asyncCPU int) {
	irqs = append(irqs, irq{async, "IR-PCI-MSIX-" + pci, "mlx5_async0@pci:" + pci, "0-3", fmt.Sprint(asyncCPU), asyncCPU})
	msi(pci, async)
	for i, n := range comps {
		cpu := fmt.Sprint(first + i)
		irqs = append(irqs, irq{n, "IR-PCI-MSIX-" + pci, fmt.Sprintf("mlx5_comp%d@pci:%s", i, pci), cpu, cpu, first + i})
		msi(pci, n)
	}
}

func seq(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

func main() {
	if err := os.RemoveAll(root); err != nil {
		log.Fatal(err)
	}
	write("sys/devices/system/node/online", "0-1\n")
	write("sys/devices/system/node/node0/cpulist", "0-23\n")
	write("sys/devices/system/node/node1/cpulist", "24-47\n")
	write("sys/devices/system/cpu/online", "0-47\n")
	write("sys/devices/system/cpu/possible", "0-47\n")
	write("sys/devices/system/cpu/isolated", "4-23\n")
	write("sys/devices/system/cpu/nohz_full", "4-23\n")
	write("proc/irq/default_smp_affinity", "0000,0000000f\n")
	write("proc/cmdline", "BOOT_IMAGE=/boot/vmlinuz-7.0.10 root=UUID=0b4c9a3e ro intel_pstate=disable intel_iommu=on iommu=pt pci=realloc default_hugepagesz=1G hugepagesz=1G hugepages=32 mitigations=off isolcpus=managed_irq,domain,4-23 nohz_full=4-23 rcu_nocbs=4-23 rcu_nocb_poll irqaffinity=0-3 kthread_cpus=0-3 intel_idle.max_cstate=1 processor.max_cstate=1 cpufreq.default_governor=performance numa_balancing=disable transparent_hugepage=never skew_tick=1 nmi_watchdog=0 nosoftlockup clocksource=tsc tsc=reliable audit=0\n")
	write("proc/sys/kernel/osrelease", "7.0.10\n")
	write("usr/share/misc/pci.ids", `#	List of PCI ID's (subset for sluice's fixtures)
8086  Intel Corporation
	0998  Ice Lake IEH
	1521  I350 Gigabit Network Connection
		8086 0001  Ethernet Server Adapter I350-T4
144d  Samsung Electronics Co Ltd
	a80a  NVMe SSD Controller PM9A1/PM9A3/980PRO
15b3  Mellanox Technologies
	1021  MT2910 Family [ConnectX-7]
	a2dc  MT43244 BlueField-3 integrated ConnectX-7 network controller

# List of known device classes, subclasses and programming interfaces
C 02  Network controller
	00  Ethernet controller
`)

	// Not network devices: must not show.
	write("sys/bus/pci/devices/0000:00:00.0/class", "0x060000\n")
	write("sys/bus/pci/devices/0000:00:00.0/vendor", "0x8086\n")
	write("sys/bus/pci/devices/0000:00:00.0/device", "0x0998\n")
	write("sys/bus/pci/devices/0000:00:00.0/numa_node", "0\n")
	addNIC(nic{pci: "0000:65:00.0", vendor: "144d", device: "a80a", class: "0x010802", driver: "nvme", numa: 0})
	irqs = append(irqs, irq{100, "IR-PCI-MSIX-0000:65:00.0", "nvme0q0", "0-3", "2", 2})
	msi("0000:65:00.0", 100)
	for i := 1; i <= 4; i++ {
		c := fmt.Sprint(i - 1)
		irqs = append(irqs, irq{100 + i, "IR-PCI-MSIX-0000:65:00.0", fmt.Sprintf("nvme0q%d", i), c, c, i - 1})
		msi("0000:65:00.0", 100+i)
	}

	addNIC(nic{pci: "0000:31:00.0", vendor: "15b3", device: "1021", class: "0x020000", driver: "mlx5_core", numa: 0, netdev: "p0", rxq: 10, uppers: []string{"p0.502"}})
	addNIC(nic{pci: "0000:31:00.1", vendor: "15b3", device: "1021", class: "0x020000", driver: "mlx5_core", numa: 0, netdev: "p1", rxq: 10, uppers: []string{"p1.504"}})
	mlx5("0000:31:00.0", 168, append([]int{169}, seq(176, 9)...), 4, 0)
	mlx5("0000:31:00.1", 170, append([]int{171}, seq(223, 9)...), 14, 1)

	addNIC(nic{pci: "0000:4b:00.0", vendor: "8086", device: "1521", class: "0x020000", driver: "igb", numa: 0, netdev: "enp75s0f0", rxq: 2})
	addNIC(nic{pci: "0000:4b:00.1", vendor: "8086", device: "1521", class: "0x020000", driver: "igb", numa: 0, netdev: "enp75s0f1", rxq: 2})
	for i, dev := range []string{"enp75s0f0", "enp75s0f1"} {
		pci := fmt.Sprintf("0000:4b:00.%d", i)
		base := 190 + 3*i
		irqs = append(irqs, irq{base, "IR-PCI-MSIX-" + pci, dev, "0-3", "2", 2})
		for q := 0; q < 2; q++ {
			c := 2*i + q
			irqs = append(irqs, irq{base + 1 + q, "IR-PCI-MSIX-" + pci, fmt.Sprintf("%s-TxRx-%d", dev, q), "0-3", fmt.Sprint(c), c})
		}
		msi(pci, base, base+1, base+2)
	}

	addNIC(nic{pci: "0000:b1:00.0", vendor: "15b3", device: "1021", class: "0x020000", driver: "mlx5_core", numa: 1, netdev: "p2", rxq: 10})
	addNIC(nic{pci: "0000:b1:00.1", vendor: "15b3", device: "1021", class: "0x020000", driver: "mlx5_core", numa: 1, netdev: "p3", rxq: 10})
	mlx5("0000:b1:00.0", 240, seq(241, 10), 24, 2)
	mlx5("0000:b1:00.1", 251, seq(252, 10), 34, 3)

	// Legacy and per-CPU interrupts, as on any x86 host.
	irqs = append(irqs, irq{0, "IR-IO-APIC", "timer", "0-3", "0", 0}, irq{9, "IR-IO-APIC", "acpi", "0-3", "1", 1})

	sort.Slice(irqs, func(i, j int) bool { return irqs[i].num < irqs[j].num })
	var b strings.Builder
	b.WriteString("     ")
	for c := 0; c < ncpu; c++ {
		fmt.Fprintf(&b, "%-11s", fmt.Sprintf("CPU%d", c))
	}
	b.WriteString("\n")
	for _, q := range irqs {
		fmt.Fprintf(&b, "%4d: ", q.num)
		for c := 0; c < ncpu; c++ {
			n := 0
			if c == q.countCPU {
				n = 1000 + 7*q.num
			}
			fmt.Fprintf(&b, "%10d ", n)
		}
		fmt.Fprintf(&b, " %s %d-edge      %s\n", q.chip, q.num%64, q.name)
		write(fmt.Sprintf("proc/irq/%d/smp_affinity_list", q.num), q.aff+"\n")
		write(fmt.Sprintf("proc/irq/%d/effective_affinity_list", q.num), q.eff+"\n")
	}
	b.WriteString(" NMI:")
	for c := 0; c < ncpu; c++ {
		fmt.Fprintf(&b, "%10d ", 3)
	}
	b.WriteString("  Non-maskable interrupts\n")
	write("proc/interrupts", b.String())
}
