// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"io"
	"strings"

	"sluice/internal/overlay"
)

// renderPlan prints steps with their equivalent commands.
func renderPlan(w io.Writer, p *overlay.Plan, verb string) {
	if p.Empty() {
		fmt.Fprintf(w, "%s: nothing to do: the host matches the file\n", p.File)
	} else {
		fmt.Fprintf(w, "%s (overlay %s): %d step(s) to %s\n", p.File, p.Name, len(p.Steps), verb)
		for i, s := range p.Steps {
			fmt.Fprintf(w, "%3d. [%s] %s %s: %s\n", i+1, s.Section, s.Action, s.Object, s.Why)
			for _, c := range s.Commands {
				fmt.Fprintf(w, "       %s\n", c)
			}
		}
	}
	if len(p.Notes) > 0 {
		fmt.Fprintln(w, "notes:")
		for _, n := range p.Notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
}

// renderNotes prints a plan's notes before apply or after teardown runs.
func renderNotes(w io.Writer, notes []string) {
	for _, n := range notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// renderVerify prints verify's checks, counters and verdict.
func renderVerify(w io.Writer, r *overlay.VerifyReport) {
	for _, c := range r.Checks {
		mark := either(c.OK, "ok  ", "FAIL")
		fmt.Fprintf(w, "%s %-9s %s\n", mark, c.Name, c.Detail)
	}
	for dev, cs := range r.Counters {
		var parts []string
		for k, v := range cs {
			parts = append(parts, fmt.Sprintf("%s +%d", k, v))
		}
		fmt.Fprintf(w, "ethtool -S %s: %s\n", dev, strings.Join(parts, ", "))
	}
	fmt.Fprintln(w, "verify: "+either(r.OK, "passed", "FAILED"))
}
