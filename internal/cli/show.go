// SPDX-License-Identifier: Apache-2.0

package cli

import "github.com/spf13/cobra"

func newShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Show the gateway, IPsec and interface state (all with --json)",
		Long: `Show what sluice and the kernel are doing. Every show command prints a table,
or JSON with --json. 'show gateway' asks the running daemon; the others read
the kernel and sysfs directly.`,
	}
}
