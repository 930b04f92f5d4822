// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"io"

	"sluice/internal/tune"
)

// The text of sluice tune plan, apply and check.

// renderNotApplicable prints one line per item that does not apply, with
// the reason, so nothing in the profile is skipped silently.
func renderNotApplicable(w io.Writer, items []tune.Item, prefix string) {
	for _, it := range tune.NotApplicable(items) {
		fmt.Fprintf(w, "%s[N/A] %s (want %s): %s\n", prefix, it.Key, it.Want, it.NotApplicable)
	}
}

// renderDrift prints one line per drifted item: key, live and wanted value.
func renderDrift(w io.Writer, items []tune.Item) {
	for _, it := range items {
		tag := either(it.ReportOnly, "[CHECK]", "[DRIFT]")
		fmt.Fprintf(w, "%s %s: live %s, want %s\n", tag, it.Key, it.Live, it.Want)
	}
}

// renderTunePlan prints the commands that would remove the drift; command line
// items are comments (they need a reboot); items that do not apply are
// comments with the reason.
func renderTunePlan(w io.Writer, items []tune.Item) {
	for _, it := range tune.Drift(items) {
		fmt.Fprintf(w, "%s\t# %s: %s -> %s\n", it.Command, it.Key, it.Live, it.Want)
	}
	renderNotApplicable(w, items, "# ")
}

// renderLayout prints the profile's CPU layout as comments, as the
// ConnectX-7 benchmark's script does; nothing when it places no CPUs.
func renderLayout(w io.Writer, p *tune.Profile) {
	rows := p.Layout()
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "# CPU layout:")
	for _, r := range rows {
		fmt.Fprintf(w, "#   %-7s %s\n", r.CPUs, r.What)
	}
}
