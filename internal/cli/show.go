package cli

import "github.com/spf13/cobra"

func init() { register(newShowCmd) }

// showSubcommands lists the `show` subtrees; each lives in its own
// show_<name>.go file. Add new ones here.
var showSubcommands = []func() *cobra.Command{newShowGatewayCmd, newShowIPsecCmd, newShowInterfaceCmd}

func newShowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Show the gateway, IPsec and interface state (all with --json)",
		Long: `Show what sluice and the kernel are doing. Every show command prints a table,
or JSON with --json. 'show gateway' asks the running daemon; the others read
the kernel and sysfs directly.`,
	}
	for _, f := range showSubcommands {
		cmd.AddCommand(f())
	}
	return cmd
}
