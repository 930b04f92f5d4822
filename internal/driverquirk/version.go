// SPDX-License-Identifier: Apache-2.0

package driverquirk

import (
	"fmt"
	"regexp"
	"strconv"
)

// Version is a kernel version, major.minor.patch. The zero Version is
// "unbounded" where a range uses it.
type Version struct{ Major, Minor, Patch int }

// V is shorthand for the table.
func V(major, minor, patch int) Version { return Version{major, minor, patch} }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// IsZero reports the unbounded version.
func (v Version) IsZero() bool { return v == Version{} }

// Less orders versions.
func (v Version) Less(w Version) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor < w.Minor
	}
	return v.Patch < w.Patch
}

var releaseRE = regexp.MustCompile(`^(\d+)\.(\d+)(?:\.(\d+))?`)

// ParseRelease reads the version at the start of a kernel release as
// uname -r prints it: "6.12.95+deb12-amd64", "5.14.0-503.el9.x86_64"
// (a vendor's base; its backports are not visible here), "7.0-rc3".
func ParseRelease(s string) (Version, bool) {
	m := releaseRE.FindStringSubmatch(s)
	if m == nil {
		return Version{}, false
	}
	var v Version
	v.Major, _ = strconv.Atoi(m[1])
	v.Minor, _ = strconv.Atoi(m[2])
	if m[3] != "" {
		v.Patch, _ = strconv.Atoi(m[3])
	}
	return v, true
}
