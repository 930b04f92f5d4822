// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"sluice/internal/fileread"
)

// IRQ is one interrupt line from /proc/interrupts with its affinity.
type IRQ struct {
	Num  int    `json:"irq"`
	Name string `json:"name"`
	// Affinity is smp_affinity_list: the CPUs it may run on (configured).
	Affinity string `json:"affinity"`
	// Effective is effective_affinity_list: the CPU(s) it really runs on
	// (equal to Affinity where the file does not exist).
	Effective string `json:"effective"`
	aff, eff  CPUSet
}

// readInterrupts parses /proc/interrupts. The action name is the last
// field of a line, as `awk '{print $NF}'` sees it (driver IRQ names have
// no spaces; those that do are not network queues).
func readInterrupts(fs FS) (map[int]*IRQ, error) {
	b, err := fileread.ReadKernel(fs.path("/proc/interrupts"), fileread.ProcLimit)
	if err != nil {
		return nil, fmt.Errorf("reading interrupts: %w", err)
	}
	irqs := map[int]*IRQ{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || !strings.HasSuffix(f[0], ":") {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(f[0], ":"))
		if err != nil {
			continue // NMI, LOC, ...
		}
		irq := &IRQ{Num: n, Name: f[len(f)-1]}
		dir := fmt.Sprintf("/proc/irq/%d/", n)
		if s, err := fs.ReadString(dir + "smp_affinity_list"); err == nil {
			irq.Affinity = s
		}
		irq.Effective = irq.Affinity
		if s, err := fs.ReadString(dir + "effective_affinity_list"); err == nil && s != "" {
			irq.Effective = s
		}
		if irq.aff, err = ParseCPUList(irq.Affinity); err != nil {
			return nil, fmt.Errorf("%ssmp_affinity_list: %w", dir, err)
		}
		if irq.eff, err = ParseCPUList(irq.Effective); err != nil {
			return nil, fmt.Errorf("%seffective_affinity_list: %w", dir, err)
		}
		irqs[n] = irq
	}
	return irqs, sc.Err()
}

// queuePattern recognises the IRQ of one RX queue by its action name, as
// drivers name them. The first submatch is the queue index.
type queuePattern struct {
	re   *regexp.Regexp
	desc string
}

// rxQueuePatterns returns the name patterns for netdev name on PCI device
// dev, most specific first. virtio is the virtio child device ("virtio2")
// for virtio-net, else "".
func rxQueuePatterns(name, dev, virtio string) []queuePattern {
	q := regexp.QuoteMeta
	ps := []queuePattern{
		// mlx5: one completion vector per channel, channel i = rx queue i.
		{regexp.MustCompile(`^mlx5_comp(\d+)@pci:` + q(dev) + `$`), "mlx5_compN@pci:" + dev},
		// igb, ixgbe, i40e, ice, bnxt, qede, ...: [driver-]IFNAME-TxRx-N.
		{regexp.MustCompile(`^(?:[\w.]+-)?` + q(name) + `-(?:TxRx|txrx|rxtx|rx|RX|Rx|fp)-(\d+)$`), name + "-TxRx-N"},
		// sfc and others: IFNAME-N.
		{regexp.MustCompile(`^` + q(name) + `-(\d+)$`), name + "-N"},
	}
	if virtio != "" {
		ps = append([]queuePattern{{regexp.MustCompile(`^` + q(virtio) + `-input\.(\d+)$`), virtio + "-input.N"}}, ps...)
	}
	return ps
}

// matchQueueIRQs maps rx queue index to IRQ using the first pattern that
// matches any candidate IRQ. candidates are the device's MSI IRQs when
// sysfs lists them, else every IRQ.
func matchQueueIRQs(patterns []queuePattern, candidates []*IRQ) (map[int]*IRQ, string) {
	for _, p := range patterns {
		got := map[int]*IRQ{}
		for _, irq := range candidates {
			if m := p.re.FindStringSubmatch(irq.Name); m != nil {
				qi, _ := strconv.Atoi(m[1])
				if prev, dup := got[qi]; !dup || irq.Num < prev.Num {
					got[qi] = irq
				}
			}
		}
		if len(got) > 0 {
			return got, p.desc
		}
	}
	descs := make([]string, len(patterns))
	for i, p := range patterns {
		descs[i] = p.desc
	}
	return nil, strings.Join(descs, ", ")
}

// deviceIRQs returns the IRQs of a PCI device (its msi_irqs) that appear in
// /proc/interrupts, or every IRQ when the device lists none.
func deviceIRQs(fs FS, dev string, irqs map[int]*IRQ) []*IRQ {
	var out []*IRQ
	for _, s := range fs.Names("/sys/bus/pci/devices/" + dev + "/msi_irqs") {
		if n, err := strconv.Atoi(s); err == nil && irqs[n] != nil {
			out = append(out, irqs[n])
		}
	}
	if len(out) == 0 {
		for _, irq := range irqs {
			out = append(out, irq)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Num < out[j].Num })
	return out
}
