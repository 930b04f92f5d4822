// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"regexp"
	"strings"
)

// fwLine matches a configuration line of `mstconfig -d DEV q` / `mlxconfig
// -d DEV q`: "         SRIOV_EN                            True(1)".
var fwLine = regexp.MustCompile(`^\s+([A-Z][A-Z0-9_]+(?:\[\d+\])?)\s+(\S.*?)\s*$`)

// ParseFirmwareQuery parses a query's "Configurations:" section into name
// -> value, keeping the value as printed ("True(1)", "3", "False(0)").
func ParseFirmwareQuery(out string) map[string]string {
	vals := map[string]string{}
	in := false
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "Configurations:") {
			in = true
			continue
		}
		if !in {
			continue
		}
		// "Next Boot" and "Current" columns (with -e): keep the first. The
		// regexp's \S takes a no-break space that Fields does not: check
		// there is a field (a panic before; FuzzParseFirmwareQuery's seed).
		if m := fwLine.FindStringSubmatch(l); m != nil {
			if f := strings.Fields(m[2]); len(f) > 0 {
				vals[m[1]] = f[0]
			}
		}
	}
	return vals
}

// fwNumber extracts the number of "True(1)", "3" or "DEVICE_DEFAULT(0)".
func fwNumber(v string) string {
	if i := strings.IndexByte(v, '('); i >= 0 && strings.HasSuffix(v, ")") {
		return v[i+1 : len(v)-1]
	}
	return v
}
