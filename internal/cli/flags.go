// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"strings"

	"github.com/spf13/cobra"
)

// addFileFlag adds -f/--file, the one name of every command's input file.
// Older names (aliases: "config/c" for --config and -c, "host") stay as
// hidden, deprecated spellings of the same flag so that scripts, the
// systemd unit and tests written for them keep working.
func addFileFlag(cmd *cobra.Command, p *string, def, usage string, aliases ...string) {
	cmd.Flags().StringVarP(p, "file", "f", def, usage)
	for _, a := range aliases {
		name, short, _ := strings.Cut(a, "/")
		cmd.Flags().StringVarP(p, name, short, def, usage)
		_ = cmd.Flags().MarkHidden(name)
		_ = cmd.Flags().MarkDeprecated(name, "use -f/--file")
		if short != "" {
			_ = cmd.Flags().MarkShorthandDeprecated(name, "use -f")
		}
	}
}
