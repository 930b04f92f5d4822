// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"sluice/internal/kernel"
)

// Set by the Makefile with -ldflags "-X sluice/internal/cli.version=...".
var (
	version = "dev"
	commit  = ""
)

type versionInfo struct {
	Version   string           `json:"version"`
	Commit    string           `json:"commit"`
	GoVersion string           `json:"go_version"`
	Kernel    *kernel.Features `json:"kernel"`
}

func buildCommit() string {
	if commit != "" {
		return commit
	}
	// `go build` inside a git checkout records the revision itself.
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision":
				rev = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "-dirty"
			}
		}
		if rev != "" {
			return rev + dirty
		}
	}
	return "unknown"
}

func newVersionCmd() *cobra.Command {
	var f versionFlags
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print version, commit, Go version and the running kernel's features",
		Long: `Print sluice's version, git commit and Go version, and probe the running kernel
for the features sluice needs: ESP, GCM, XFRM, XDP, BTF, bonding, 802.1Q,
VXLAN, Geneve, tc flower, netdevsim.

Each feature is tried for real inside a throwaway network namespace (an SA is
installed, a link is created, an XDP program is loaded), so the answer is what
the kernel does, not what a config file claims. Probes need root; without it
they are listed as unknown.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runVersion(cmd, f) },
	}
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print a JSON object")
	return cmd
}

type versionFlags struct {
	asJSON bool
}

func runVersion(cmd *cobra.Command, f versionFlags) error {
	info := versionInfo{
		Version:   version,
		Commit:    buildCommit(),
		GoVersion: runtime.Version(),
		Kernel:    kernel.ProbeFeatures(),
	}
	return emit(cmd.OutOrStdout(), f.asJSON, info, func() { printVersion(cmd.OutOrStdout(), info) })
}

func printVersion(w io.Writer, info versionInfo) {
	fmt.Fprintf(w, "sluice %s (commit %s, %s)\n", info.Version, info.Commit, info.GoVersion)
	fmt.Fprintf(w, "kernel %s\n\n", info.Kernel.Release)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FEATURE\tSTATE\tEVIDENCE")
	for _, n := range info.Kernel.Names() {
		state := "no"
		switch {
		case slices.Contains(info.Kernel.Unknown, n):
			state = "unknown"
		case info.Kernel.Have[n]:
			state = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", n, state, info.Kernel.Evidence[n])
	}
	tw.Flush()
	if len(info.Kernel.Unknown) > 0 {
		// The probes create namespaces, links and SAs: CAP_NET_ADMIN.
		fmt.Fprintf(w, "\ncould not probe %s (run as root)\n", strings.Join(info.Kernel.Unknown, ", "))
	}
}
