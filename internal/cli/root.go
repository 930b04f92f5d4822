// SPDX-License-Identifier: Apache-2.0

// Package cli implements sluice's command line. The command tree is built in
// one function, NewRootCommand; each command lives in its own file as a
// declaration (newXCmd), a flags struct and a named runX. All output is made
// here: --json through writeJSON (output.go), text through the render_*.go
// files, exit codes from the one table in exitcode.go.
package cli

import (
	"context"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// NewRootCommand builds the whole command tree, here and nowhere else, so
// that the tree can be walked (man pages, completions, the exit-code help)
// and read in one place.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "sluice",
		Short: "IPsec with NIC offload: fast path, overlay, diagnosis, lab and benchmarks",
		Long: `sluice makes IPsec with NIC offload fast, correct and observable.

It mirrors the kernel's XFRM policies into an XDP fast path, sets up encrypted
overlays from one declarative file, diagnoses offload and tuning problems, and
builds labs that measure throughput, loss and latency.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.HiddenDefaultCmd = true
	root.AddCommand(
		newVersionCmd(),
		with(newGatewayCmd(), newGatewayRunCmd(), newGatewayStopCmd(), newGatewayExplainCmd()),
		// The encrypted overlay: sluice plan|apply|verify|teardown -f host.yaml.
		newPlanCmd(), newApplyCmd(), newVerifyCmd(), newTeardownCmd(),
		newMTUCmd(),
		newAgentCmd(),
		newDoctorCmd(),
		newHWCheckCmd(),
		with(newShowCmd(),
			newShowGatewayCmd(),
			with(newShowIPsecCmd(), newShowIPsecSACmd(), newShowIPsecPolicyCmd(), newShowIPsecStatsCmd()),
			with(newShowInterfaceCmd(),
				newShowInterfaceTopologyCmd(),
				with(newShowRxQueueCmd(), newShowRxQueueTopologyCmd()))),
		with(newTuneCmd(), newTuneSub("plan"), newTuneSub("apply"), newTuneSub("check")),
		with(newLabCmd(), newLabUpCmd(), newLabDownCmd(), newLabStatusCmd()),
		with(newBenchCmd(), newBenchFastpathCmd(), newBenchRunCmd(), newBenchCompareCmd(),
			newBenchIperf3Cmd(), newBenchPingCmd(), newBenchTRexProfileCmd(), newBenchRekeyCmd()),
		with(newSwanCmd(), newSwanGenCmd(), newSwanUpCmd(), newSwanDownCmd(), newSwanStatusCmd()),
		with(newVMCmd(), newVMRunCmd(), newVMCheckCmd(), newVMNetdevsimCmd(), newVMNicmodelCmd()),
	)
	root.Long += "\n\n" + exitCodesHelp(root)
	addExitCodeHelp(root)
	markRunErrors(root)
	return root
}

// with adds subs under parent and returns parent, so the tree above reads as
// a tree.
func with(parent *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	parent.AddCommand(subs...)
	return parent
}

// Run executes the command line args (without the program name).
func Run(args []string) error {
	root := NewRootCommand()
	root.SetArgs(args)
	return Execute(root)
}

// signalContext is parent, cancelled by SIGINT or SIGTERM: a long command
// stops cleanly (labs down, reports written) when interrupted.
func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, syscall.SIGINT, syscall.SIGTERM)
}
