// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"strings"
	"testing"
)

// CPU numbers past what Linux supports are refused before a set is built:
// "0-400000000" in a tune profile used to run for minutes.
func TestCPUListBounds(t *testing.T) {
	if set, err := ParseCPUList("0-8191"); err != nil || len(set) != MaxCPUs {
		t.Errorf("0-8191: %d CPUs, %v", len(set), err)
	}
	for _, s := range []string{"0-400000000", "8192", "1,9000-9001"} {
		if _, err := ParseCPUList(s); err == nil || !strings.Contains(err.Error(), "past the largest CPU number Linux supports (8191)") {
			t.Errorf("ParseCPUList(%q): %v", s, err)
		}
	}
	if _, err := ParseCPUMask(strings.Repeat("ffffffff,", MaxCPUs/32) + "1"); err == nil {
		t.Errorf("ParseCPUMask of %d words: no error", MaxCPUs/32+1)
	}
	if set, err := ParseCPUMask(strings.TrimSuffix(strings.Repeat("ffffffff,", MaxCPUs/32), ",")); err != nil || len(set) != MaxCPUs {
		t.Errorf("ParseCPUMask of %d full words: %d CPUs, %v", MaxCPUs/32, len(set), err)
	}
}
