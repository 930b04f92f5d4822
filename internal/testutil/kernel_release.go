// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// KernelAtLeast reports whether the running kernel is major.minor or
// newer, for tests whose expectation a kernel release changed (the VM
// runs 6.12 and the next kernel, docs/testing.md).
func KernelAtLeast(tb testing.TB, major, minor int) bool {
	tb.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		tb.Fatal(err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	ma, mi, ok := parseRelease(release)
	if !ok {
		tb.Fatalf("kernel release %q: not MAJOR.MINOR...", release)
	}
	return ma > major || (ma == major && mi >= minor)
}

// parseRelease reads the major and minor numbers of a release such as
// "7.3.4+deb13-amd64".
func parseRelease(release string) (major, minor int, ok bool) {
	f := strings.SplitN(release, ".", 3)
	if len(f) < 2 {
		return 0, 0, false
	}
	end := strings.IndexFunc(f[1], func(r rune) bool { return r < '0' || r > '9' })
	if end >= 0 {
		f[1] = f[1][:end]
	}
	ma, err1 := strconv.Atoi(f[0])
	mi, err2 := strconv.Atoi(f[1])
	return ma, mi, err1 == nil && err2 == nil
}
