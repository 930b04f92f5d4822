// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"sluice/internal/diag"
)

// The text of sluice doctor, show interface topology and show interface
// rx-queue topology: diag returns the report, the topology and the queues;
// their text is made here, like every other command's.

// renderDoctor prints one block per result:
//
//	[FAIL] bond-offload bond0: bond claims esp-hw-offload but slave veth1 lacks it
//	       evidence: ...
//	       fix: ...
func renderDoctor(w io.Writer, r *diag.Report) {
	for _, res := range r.Results {
		subj := either(res.Subject != "", " "+res.Subject+":", "")
		fmt.Fprintf(w, "%s %s%s %s\n", res.Verdict.Tag(), res.Check, subj, res.Summary)
		for _, e := range res.Evidence {
			fmt.Fprintf(w, "       evidence: %s\n", e)
		}
		if res.Fix != "" && res.Verdict >= diag.Warn {
			fmt.Fprintf(w, "       fix: %s\n", res.Fix)
		}
	}
	fmt.Fprintf(w, "\n%d failed, %d warnings, %d ok, %d info, %d skipped\n",
		r.Counts["fail"], r.Counts["warn"], r.Counts["ok"], r.Counts["info"], r.Counts["skip"])
}

// renderTopology prints the topology as a tree, nodes without network
// devices left out:
//
//	PCI ethernet topology
//	├── NUMA node 0
//	│   ├── 0000:31:00.0
//	│   │   ├── vendor: Mellanox Technologies [15b3]
func renderTopology(w io.Writer, t *diag.Topology) {
	fmt.Fprintln(w, "PCI ethernet topology")
	var shown []diag.NUMANode
	for _, n := range t.Nodes {
		if len(n.Devices) > 0 {
			shown = append(shown, n)
		}
	}
	if len(shown) == 0 {
		fmt.Fprintln(w, "└── (no PCI network devices)")
		return
	}
	for i, n := range shown {
		lastNode := i == len(shown)-1
		branch, indent := "├── ", "│   "
		if lastNode {
			branch, indent = "└── ", "    "
		}
		fmt.Fprintln(w, branch+numaNodeLabel(n.Node))
		for j, d := range n.Devices {
			lastDev := j == len(n.Devices)-1
			db, di := "├── ", "│   "
			if lastDev {
				db, di = "└── ", "    "
			}
			fmt.Fprintln(w, indent+db+d.Address)
			p := indent + di
			fmt.Fprintf(w, "%s├── %-7s %s\n", p, "vendor:", pciNameWithID(d.Vendor, d.VendorID))
			fmt.Fprintf(w, "%s├── %-7s %s\n", p, "model:", pciNameWithID(d.Model, d.DeviceID))
			fmt.Fprintf(w, "%s├── %-7s %s\n", p, "driver:", textOrNone(d.Driver))
			fmt.Fprintf(w, "%s└── %-7s %s\n", p, "net:", textOrNone(strings.Join(d.Netdevs, ", ")))
		}
	}
}

// renderRxTopology prints the queues by node and interface, then the
// diagnostic, in the layout of the ConnectX-7 benchmark:
//
//	NUMA node 0  [cpus: 0-23  24 CPUs]
//	  p0  rx_queues:10
//	    rx-0   irq:169    cpu:4
func renderRxTopology(w io.Writer, rt *diag.RxTopology) {
	for _, n := range rt.Nodes {
		cpus := either(n.NumCPUs == 1, "CPU", "CPUs")
		fmt.Fprintf(w, " %s  [cpus: %s  %d %s]\n", numaNodeLabel(n.Node), n.CPUs, n.NumCPUs, cpus)
		for _, ri := range n.Interfaces {
			fmt.Fprintf(w, "   %s  rx_queues:%d\n", ri.Name, ri.RxQueues)
			for _, q := range ri.Queues {
				irq, cpu := "irq:-", "cpu:-"
				if q.IRQ != 0 {
					irq, cpu = "irq:"+strconv.Itoa(q.IRQ), "cpu:"+q.Affinity
					if q.Effective != q.Affinity {
						cpu += " (effective " + q.Effective + ")"
					}
				}
				fmt.Fprintf(w, "     %-7s%-11s%s\n", "rx-"+strconv.Itoa(q.Queue), irq, cpu)
			}
		}
	}
	if len(rt.Nodes) == 0 {
		fmt.Fprintln(w, " (no PCI network interfaces)")
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Diagnostic:")
	for _, f := range rt.Diagnostic {
		fmt.Fprintln(w, "  "+renderFinding(f))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  Overall: %s\n", rt.Summary)
}

// renderFinding is one diagnostic line: "[WARN] p0: rx-5 irq:180 ...".
func renderFinding(f diag.Finding) string {
	if f.Subject != "" {
		return fmt.Sprintf("%s %s: %s", f.Verdict.Tag(), f.Subject, f.Message)
	}
	return fmt.Sprintf("%s %s", f.Verdict.Tag(), f.Message)
}

func numaNodeLabel(n int) string {
	if n < 0 {
		return "NUMA node unknown"
	}
	return fmt.Sprintf("NUMA node %d", n)
}

func textOrNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// pciNameWithID renders "Mellanox Technologies [15b3]", or the ID alone
// when pci.ids has no name for it.
func pciNameWithID(name, id string) string {
	if name == "" {
		name = "unknown"
	}
	return fmt.Sprintf("%s [%s]", name, id)
}
