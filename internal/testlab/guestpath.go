// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"path/filepath"
	"strings"
)

// guestTmpfs are the host directories the guest covers with its own tmpfs
// (init.sh): what the host keeps there does not exist in the guest.
var guestTmpfs = []string{"/tmp", "/var/tmp", "/run", "/root", "/dev/shm"}

// HiddenInGuest reports whether the guest sees something other than the
// host's file at path: path is under one of the guest's tmpfs mounts and
// not under share, which the guest mounts at the same path on top.
func HiddenInGuest(path, share string) bool {
	path = filepath.Clean(path)
	if share != "" && under(path, filepath.Clean(share)) {
		return false
	}
	for _, d := range guestTmpfs {
		if under(path, d) {
			return true
		}
	}
	return false
}

func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// ShellQuote quotes s for /bin/sh.
func ShellQuote(s string) string { return shellQuote(s) }

// DefaultShare is the share a run uses when Options.Share is empty: the
// repository around the working directory, else the working directory.
func DefaultShare() (string, error) {
	s, err := repoRoot()
	if err != nil {
		return "", err
	}
	return absReal(s)
}

// DefaultCacheDir is where runs cache the initramfs and netdevsim build; it
// is on the host's root, so the guest sees it.
const DefaultCacheDir = defaultCacheDir
