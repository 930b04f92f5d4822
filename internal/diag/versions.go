// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"sluice/internal/swan"
)

// The kernel releases where the features sluice relies on appeared
// (docs/install.md): packet offload (the NIC encrypts and encapsulates),
// the ICMP-error FWD lookup the fast path reproduces, per-CPU SAs.
var kernelMilestones = []struct {
	major, minor int
	what, why    string
	verdict      Verdict
}{
	{6, 2, "IPsec packet offload", "the gateway fast path forwards only what a packet-offloaded SA encrypts in the NIC", Warn},
	{6, 9, "the ICMP-error FWD lookup", "the fast path decides ICMP errors as 6.9+ kernels do (by the packet they quote); an older kernel may decide differently", Warn},
	{6, 13, "per-CPU SAs (RFC 9611)", "one SA per peer puts a tunnel's traffic on one RX queue and one CPU", Info},
}

func checkKernelVersion(f *Facts, _ *DoctorOptions) []Result {
	if f.Kernel == nil || f.Kernel.Release == "" {
		return []Result{{Verdict: Skip, Summary: "kernel release not known"}}
	}
	rel := f.Kernel.Release
	worst, ev := OK, []string{}
	var lacks []string
	for _, m := range kernelMilestones {
		if kernelAtLeast(rel, m.major, m.minor) {
			ev = append(ev, fmt.Sprintf("%s: since %d.%d, present", m.what, m.major, m.minor))
			continue
		}
		ev = append(ev, fmt.Sprintf("%s: since %d.%d, missing (%s)", m.what, m.major, m.minor, m.why))
		lacks = append(lacks, m.what)
		worst = max(worst, m.verdict)
	}
	r := Result{Verdict: worst, Subject: "kernel " + rel, Evidence: ev}
	if worst == OK {
		r.Summary = "has packet offload, the ICMP-error FWD lookup and per-CPU SAs"
		return []Result{r}
	}
	r.Summary = "lacks " + strings.Join(lacks, ", ")
	r.Fix = "run Linux 6.13 or later (6.12 LTS has all but per-CPU SAs); distribution kernels may carry these earlier"
	return []Result{r}
}

// checkStrongSwan grades the strongSwan that keys the tunnels: hw_offload =
// packet needs 5.9.10 (5.9.8 refuses it), per_cpu_sas 6.0.2.
func checkStrongSwan(f *Facts, _ *DoctorOptions) []Result {
	if f.StrongSwan == "" {
		why := "strongSwan not found: neither charon over VICI nor swanctl answered"
		if e := f.Errors["strongswan"]; e != "" {
			why += " (" + e + ")"
		}
		return []Result{{Verdict: Skip, Summary: why}}
	}
	v := parseVersion(f.StrongSwan)
	ev := []string{"strongSwan " + f.StrongSwan}
	subject := "strongSwan " + f.StrongSwan
	switch {
	case v == nil:
		return []Result{{Verdict: Skip, Subject: subject, Summary: "version not understood", Evidence: ev}}
	case versionLess(v, 5, 9, 10):
		return []Result{{Verdict: Warn, Subject: subject, Evidence: ev,
			Summary: "refuses hw_offload = packet (needs 5.9.10): only crypto offload, which the gateway fast path cannot use",
			Fix:     "install strongSwan 6.x (5.9.10 at least)"}}
	case versionLess(v, 6, 0, 2):
		return []Result{{Verdict: Info, Subject: subject, Evidence: ev,
			Summary: "packet offload works; per-CPU SAs (per_cpu_sas) need 6.0.2",
			Fix:     "strongSwan 6.x is recommended"}}
	}
	return []Result{{Verdict: OK, Subject: subject, Evidence: ev, Summary: "has hw_offload = packet and per_cpu_sas"}}
}

var swanctlRE = regexp.MustCompile(`strongSwan (\d+\.\d+(?:\.\d+)?\S*) swanctl`)

var versionRE = regexp.MustCompile(`(\d+)\.(\d+)(?:\.(\d+))?`)

// parseVersion reads "5.9.8", "6.0.2dr1" or swanctl's "strongSwan swanctl 5.9.8".
func parseVersion(s string) []int {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return nil
	}
	var v []int
	for _, p := range m[1:] {
		n, _ := strconv.Atoi(p)
		v = append(v, n)
	}
	return v
}

func versionLess(v []int, a, b, c int) bool {
	for i, w := range []int{a, b, c} {
		if v[i] != w {
			return v[i] < w
		}
	}
	return false
}

// gatherStrongSwan asks the running charon for its version, else swanctl
// (the installed one): the daemon's is what keys the tunnels.
func gatherStrongSwan(f *Facts) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if c, err := swan.Connect(ctx, swan.DefaultURI); err == nil {
		v, err := c.Version()
		c.Close()
		if err == nil && v.Version != "" {
			f.StrongSwan = v.Version
			return
		}
	}
	// swanctl 5.9 prints "strongSwan 5.9.8 swanctl" and exits 2 when charon is not running.
	out, err := exec.CommandContext(ctx, "swanctl", "--version").CombinedOutput()
	if m := swanctlRE.FindStringSubmatch(string(out)); m != nil {
		f.StrongSwan = m[1]
		return
	}
	f.fail("strongswan", fmt.Errorf("charon not reachable on %s, swanctl --version: %v", swan.DefaultURI, err))
}
