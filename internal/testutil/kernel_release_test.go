// SPDX-License-Identifier: Apache-2.0

package testutil

import "testing"

func TestParseRelease(t *testing.T) {
	for _, c := range []struct {
		in         string
		major, min int
		ok         bool
	}{
		{"7.3.4+deb13-amd64", 7, 3, true},
		{"6.12.95+deb12-amd64", 6, 12, true},
		{"6.18-rc1", 6, 18, true},
		{"6.18.44-fc-v1045", 6, 18, true},
		{"seven", 0, 0, false},
	} {
		ma, mi, ok := parseRelease(c.in)
		if ok != c.ok || (ok && (ma != c.major || mi != c.min)) {
			t.Errorf("parseRelease(%q) = %d, %d, %v; want %d, %d, %v", c.in, ma, mi, ok, c.major, c.min, c.ok)
		}
	}
}
