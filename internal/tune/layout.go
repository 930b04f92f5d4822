// SPDX-License-Identifier: Apache-2.0

package tune

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"sluice/internal/diag"
)

// cmdlineCPUs parses a CPU list kernel parameter, dropping isolcpus'
// flags ("managed_irq,domain,4-23" -> 4-23).
func cmdlineCPUs(v string) diag.CPUSet {
	var keep []string
	for _, f := range strings.Split(v, ",") {
		if f != "" && (f[0] >= '0' && f[0] <= '9') {
			keep = append(keep, f)
		}
	}
	set, err := diag.ParseCPUList(strings.Join(keep, ","))
	if err != nil {
		return nil
	}
	return set
}

// validateLayout places the daemon on housekeeping CPUs as the ConnectX-7 benchmark's
// layout does: never on a CPU that serves an RX queue (the daemon's
// netlink work would steal the queue's cycles) nor on an isolated CPU
// (isolcpus/nohz_full are for the data path; the scheduler would not
// balance the daemon's threads there).
func (p *Profile) validateLayout() error {
	if p.DaemonCPUs == "" {
		return nil
	}
	set, err := diag.ParseCPUList(p.DaemonCPUs)
	if err != nil || len(set) == 0 {
		return p.errf("daemon-cpus", "%q: want a CPU list like 2-3", p.DaemonCPUs)
	}
	p.daemon = set.Sorted()
	for _, name := range slices.Sorted(maps.Keys(p.Interfaces)) {
		ifc := p.Interfaces[name]
		if len(ifc.cpus) == 0 {
			continue
		}
		rx, _ := diag.ParseCPUList(ifc.CPUs)
		if both := set.Intersect(rx); len(both) > 0 {
			return p.errf("daemon-cpus", "%s shares CPU %s with %s's RX queues (cpus: %s): put the daemon on housekeeping CPUs, as the ConnectX-7 benchmark does (0-1 kernel, 2-3 daemon, 4-23 RX queues)", p.DaemonCPUs, both, name, ifc.CPUs)
		}
	}
	for _, k := range []string{"isolcpus", "nohz_full"} {
		if both := set.Intersect(cmdlineCPUs(p.Cmdline[k])); len(both) > 0 {
			return p.errf("daemon-cpus", "%s includes CPU %s, isolated by cmdline %s=%s: the daemon belongs on housekeeping CPUs outside it", p.DaemonCPUs, both, k, p.Cmdline[k])
		}
	}
	return nil
}

// LayoutRow is one line of a profile's CPU layout: CPUs and what runs
// on them.
type LayoutRow struct {
	CPUs diag.CPUSet
	What string
}

// Layout is the profile's CPU layout as the ConnectX-7 benchmark's script
// comments it: housekeeping, the daemon, each port's RX queues, by first
// CPU. Nil when the profile places no CPUs.
func (p *Profile) Layout() []LayoutRow {
	type row struct {
		first int
		cpus  diag.CPUSet
		what  string
	}
	var rows []row
	used := diag.CPUSet{}
	if len(p.daemon) > 0 {
		set, _ := diag.ParseCPUList(p.DaemonCPUs)
		used = used.Union(set)
		rows = append(rows, row{p.daemon[0], set, fmt.Sprintf("sluice gateway daemon (gateway.yaml: daemon-cpu: %s)", p.DaemonCPUs)})
	}
	for _, name := range slices.Sorted(maps.Keys(p.Interfaces)) {
		ifc := p.Interfaces[name]
		if len(ifc.cpus) == 0 {
			continue
		}
		set, _ := diag.ParseCPUList(ifc.CPUs)
		n := len(ifc.cpus)
		if ifc.RxQueues > 0 {
			n = ifc.RxQueues
		}
		used = used.Union(set)
		rows = append(rows, row{ifc.cpus[0], set, fmt.Sprintf("%s rx queues 0..%d", name, n-1)})
	}
	if len(rows) == 0 {
		return nil
	}
	if hk := cmdlineCPUs(p.Cmdline["irqaffinity"]).Minus(used); len(hk) > 0 {
		rows = append(rows, row{hk.Sorted()[0], hk, "housekeeping (kernel, generic IRQs, services: irqaffinity minus the above)"})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].first < rows[j].first })
	out := make([]LayoutRow, len(rows))
	for i, r := range rows {
		out[i] = LayoutRow{r.cpus, r.what}
	}
	return out
}
