// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"strings"
	"testing"
)

// TestLeakOnSAMissFailsClosed: an interface whose driver cannot be read
// (no such device; loopback answers no `ethtool -i`) takes the strict SA
// check, as it takes exact selector matching: the gateway cannot prove
// that its device drops what no SA serves.
func TestLeakOnSAMissFailsClosed(t *testing.T) {
	for _, name := range []string{"sluice-none0", "lo"} {
		iface, driver := leakOnSAMiss([]Iface{{Name: name}})
		if iface != name || !strings.HasPrefix(driver, "unknown (ethtool -i "+name) {
			t.Errorf("%s: leakOnSAMiss = %q, %q; want %s with an unknown driver", name, iface, driver, name)
		}
	}
}
