// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"sluice/internal/kernel"
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

// linkFlag looks up the interface a flag names; the kernel says it is
// not there, the fix is said here, where the name was typed.
func linkFlag(flag, name string) (*kernel.LinkInfo, error) {
	li, err := kernel.Link(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (check the name with `ip link`)", flag, err)
	}
	return li, nil
}
