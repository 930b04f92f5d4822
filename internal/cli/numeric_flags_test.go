// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"strings"
	"testing"
)

// Numbers a command cannot use are usage errors before anything runs:
// each of these used to be accepted (a negative MTU "fits", NaN rates and
// thresholds, a CPU the machine lacks, zero tunnels, a negative repeat
// that ran once).
func TestNumericFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mtu", "--check", "-5"}, "--check -5: an MTU is 68 to 65535"},
		{[]string{"mtu", "--check", "1400,70000"}, "--check 70000"},
		{[]string{"bench", "run", "--rate-max", "NaN"}, `--rate-max "NaN": write a positive rate`},
		{[]string{"bench", "run", "--rate-max", "1e308Gpps"}, `--rate-max "1e308Gpps": more than 1.5e+10 pps`},
		{[]string{"bench", "run", "--rate-max", "-2Mpps"}, `--rate-max "-2Mpps": write a positive rate`},
		{[]string{"bench", "run", "--loss-threshold", "NaN"}, "--loss-threshold NaN: a percentage"},
		{[]string{"bench", "run", "--gen-cpus", "99"}, "--gen-cpus: CPU 99 is not between 0 and"},
		{[]string{"bench", "run", "--gen-cpus", "-1"}, "--gen-cpus: CPU -1 is not between 0 and"},
		{[]string{"bench", "run", "--gen-cpus", "0,0"}, "--gen-cpus: CPU 0 is listed twice"},
		{[]string{"bench", "run", "--tunnels", "0"}, "--tunnels 0: use 1 to"},
		{[]string{"bench", "compare", "--tunnels", "0"}, "--tunnels 0: use 1 to"},
		{[]string{"bench", "fastpath", "--repeat", "-1"}, "--repeat -1: run the program at least once"},
		{[]string{"bench", "compare", "--rate-max", "fast"}, `--rate-max "fast": write a positive rate such as 2Mpps, 500kpps or 10Gbps, or auto`},
		{[]string{"bench", "compare", "--rate-start", "0"}, `--rate-start "0": write a positive rate`},
		{[]string{"bench", "compare", "--rate-factor", "1"}, "--rate-factor 1: use 1.05 to 10"},
		{[]string{"bench", "compare", "--refine", "21"}, "--refine 21: use 0 to 20"},
		{[]string{"bench", "run", "--rate-max", "auto", "--search", "ndr"}, "--search ndr: needs a fixed --rate-max"},
	} {
		out, err := runCLI(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || ExitCode(err) != ExitUsage {
			t.Errorf("sluice %s: exit %d, %v\nwant a usage error with %q\n%s", strings.Join(tc.args, " "), ExitCode(err), err, tc.want, out)
		}
	}
}
