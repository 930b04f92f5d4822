// Package cli implements sluice's command line: one file per subcommand,
// each registering itself on the root command.
package cli

import "github.com/spf13/cobra"

// subcommands is filled by init functions in this package's files so that
// adding a command touches one file only.
var subcommands []func() *cobra.Command

func register(f func() *cobra.Command) { subcommands = append(subcommands, f) }

// NewRoot builds the command tree.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "sluice",
		Short: "IPsec with NIC offload: fast path, overlay, diagnosis, lab and benchmarks",
		Long: `sluice makes IPsec with NIC offload fast, correct and observable.

It mirrors the kernel's XFRM policies into an XDP fast path, sets up encrypted
overlays from one declarative file, diagnoses offload and tuning problems, and
builds labs that measure throughput, loss and latency.

` + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.HiddenDefaultCmd = true
	for _, f := range subcommands {
		root.AddCommand(f())
	}
	markRunErrors(root)
	return root
}

// Run executes the command line args (without the program name).
func Run(args []string) error {
	root := NewRoot()
	root.SetArgs(args)
	return Execute(root)
}
