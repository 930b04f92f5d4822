// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"sluice/internal/diag"
)

func newShowInterfaceCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "interface",
		Short: "Show network interfaces: PCI/NUMA topology and RX queue pinning",
		Long: `Show where the host's network interfaces sit: their PCI devices by NUMA
node, and which CPU serves each receive queue's interrupt.`,
		Example: `  sluice show interface topology
  sluice show interface rx-queue topology`,
		Args: cobra.NoArgs,
	}
}

func newShowRxQueueCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rx-queue",
		Short: "Show RX queues",
		Args:  cobra.NoArgs,
	}
}

// addSysroot adds --sysroot: read a captured /sys and /proc tree instead of
// the live host's (support bundles, tests).
func addSysroot(cmd *cobra.Command, root *string) {
	cmd.Flags().StringVar(root, "sysroot", "/", "read sys/, proc/ and usr/share/misc/pci.ids under this directory instead of /")
}

func newShowInterfaceTopologyCmd() *cobra.Command {
	var f sysrootFlags
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Show the PCI network devices by NUMA node: address, vendor, model, driver, interfaces",
		Long: `Walk /sys/bus/pci/devices for network devices (PCI class 02, or any device
with a network interface) and print them by NUMA node, with vendor and model
names from the system's pci.ids (/usr/share/misc/pci.ids, from pciutils, or
/usr/share/hwdata/pci.ids), the bound driver and the interfaces in this
network namespace.

A device whose firmware reports no NUMA node (numa_node -1) is listed under
"NUMA node unknown" on a multi-node host, and under the only node otherwise.
IDs without a name in pci.ids print as "unknown [id]".`,
		Example: `  sluice show interface topology
  sluice show interface topology --json | jq '.nodes[].devices[].netdevs'
  sluice show interface topology --sysroot ./captured-host`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runShowInterfaceTopology(cmd, f) },
	}
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print a JSON object")
	addSysroot(cmd, &f.root)
	return cmd
}

// sysrootFlags are the flags of the commands that read sys/ and proc/.
type sysrootFlags struct {
	asJSON bool
	root   string
}

func runShowInterfaceTopology(cmd *cobra.Command, f sysrootFlags) error {
	topo, err := diag.ReadTopology(diag.FS{Root: f.root})
	if err != nil {
		return fmt.Errorf("show interface topology: %w", err)
	}
	return emit(cmd.OutOrStdout(), f.asJSON, topo, func() { renderTopology(cmd.OutOrStdout(), topo) })
}

func newShowRxQueueTopologyCmd() *cobra.Command {
	var f sysrootFlags
	cmd := &cobra.Command{
		Use:   "topology [INTERFACE...]",
		Short: "Show each RX queue's IRQ and CPU by NUMA node, with a pinning verdict",
		Long: `List, per NUMA node and interface, the receive queues (/sys/class/net/IF/queues),
the IRQ serving each (matched by name in /proc/interrupts among the device's
msi_irqs: mlx5_compN@pci:ADDR, IF-TxRx-N, virtioN-input.N, IF-N) and the CPUs
it may run on (/proc/irq/N/smp_affinity_list; the effective CPU is shown when
it differs). VLANs and other devices stacked on an interface are listed under
it with rx_queues:0.

Then a diagnostic, one line per finding:
  [FAIL] a queue's IRQ runs on a CPU of another NUMA node than its device
  [WARN] a queue's IRQ is not pinned to one CPU, or may leave the device's node
  [WARN] two queues share a CPU
  [WARN] queues on CPUs that are not isolated (isolcpus=/nohz_full= set)
  [WARN] queues on housekeeping CPUs (irqaffinity=, or the CPUs not isolated),
         or another IRQ running on a queue's CPU
  [INFO] a port whose queues all sit on housekeeping CPUs is a management port
         and is not graded
and an overall verdict: optimal, suboptimal (warnings) or has errors.

With INTERFACE arguments only those (and their VLANs) are shown and graded;
name the data-path ports to leave management ports out.`,
		Example: `  sluice show interface rx-queue topology
  sluice show interface rx-queue topology p0 p1
  sluice show interface rx-queue topology --json | jq '.diagnostic[] | select(.verdict != "ok")'`,
		RunE: func(cmd *cobra.Command, args []string) error { return runShowRxQueueTopology(cmd, f, args) },
	}
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print a JSON object")
	addSysroot(cmd, &f.root)
	return cmd
}

func runShowRxQueueTopology(cmd *cobra.Command, f sysrootFlags, args []string) error {
	rt, err := diag.ReadRxTopology(diag.FS{Root: f.root}, args)
	if err != nil {
		return fmt.Errorf("show interface rx-queue topology: %w", err)
	}
	return emit(cmd.OutOrStdout(), f.asJSON, rt, func() { renderRxTopology(cmd.OutOrStdout(), rt) })
}
