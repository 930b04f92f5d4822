// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// preferredKernel is the series the VM tests are written against (bookworm-
// backports, what `make setup` installs); any other kernel is a fallback.
const preferredKernel = "vmlinuz-6.12"

var errNoKernel = errors.New("no VM kernel in /boot (run make setup)")

// defaultKernel picks the newest dir/vmlinuz-6.12*, else the newest
// dir/vmlinuz-*.
func defaultKernel(dir string) (string, error) {
	all, _ := filepath.Glob(filepath.Join(dir, "vmlinuz-*"))
	var pref []string
	for _, k := range all {
		if strings.HasPrefix(filepath.Base(k), preferredKernel) {
			pref = append(pref, k)
		}
	}
	if k := newestKernel(pref); k != "" {
		return k, nil
	}
	if k := newestKernel(all); k != "" {
		return k, nil
	}
	return "", errNoKernel
}

func newestKernel(paths []string) string {
	best := ""
	for _, p := range paths {
		if best == "" || compareVersions(filepath.Base(p), filepath.Base(best)) > 0 {
			best = p
		}
	}
	return best
}

// compareVersions orders strings like "vmlinuz-6.12.9" < "vmlinuz-6.12.10":
// digit runs compare as numbers, everything else byte-wise.
func compareVersions(a, b string) int {
	for a != "" && b != "" {
		ca, ra := versionChunk(a)
		cb, rb := versionChunk(b)
		na, errA := strconv.ParseUint(ca, 10, 64)
		nb, errB := strconv.ParseUint(cb, 10, 64)
		switch {
		case errA == nil && errB == nil:
			if na != nb {
				if na < nb {
					return -1
				}
				return 1
			}
		case ca != cb:
			return strings.Compare(ca, cb)
		}
		a, b = ra, rb
	}
	return strings.Compare(a, b)
}

// versionChunk splits s into its leading run of digits or of non-digits.
func versionChunk(s string) (chunk, rest string) {
	digit := func(c byte) bool { return c >= '0' && c <= '9' }
	d := digit(s[0])
	i := 1
	for i < len(s) && digit(s[i]) == d {
		i++
	}
	return s[:i], s[i:]
}

// kernelRelease returns the release ("uname -r") of a bzImage: the modules
// for the guest live in /lib/modules/<release>. It reads the version string
// the x86 boot header points to, so a kernel copied under any name works;
// failing that, it trusts a "vmlinuz-<release>" file name.
func kernelRelease(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	hdr := make([]byte, 64<<10)
	n, _ := f.ReadAt(hdr, 0)
	if rel := releaseFromBzImage(hdr[:n]); rel != "" {
		return rel, nil
	}
	if base := filepath.Base(path); strings.HasPrefix(base, "vmlinuz-") {
		return strings.TrimPrefix(base, "vmlinuz-"), nil
	}
	return "", fmt.Errorf("cannot tell the release of kernel %s (not a bzImage, not named vmlinuz-<release>)", path)
}

// releaseFromBzImage implements the boot protocol lookup: "HdrS" at 0x202,
// and the 16-bit field at 0x20e is the offset, minus 0x200, of a
// NUL-terminated "6.12.95+deb12-amd64 (builder) #1 SMP ..." string.
func releaseFromBzImage(b []byte) string {
	if len(b) < 0x210 || string(b[0x202:0x206]) != "HdrS" {
		return ""
	}
	off := int(binary.LittleEndian.Uint16(b[0x20e:])) + 0x200
	if off >= len(b) {
		return ""
	}
	s := b[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	if i := bytes.IndexByte(s, ' '); i >= 0 {
		s = s[:i]
	}
	return string(s)
}
