// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"fmt"
	"os"
	"path/filepath"
)

// GuestBinary returns a path where the guest finds this binary, named
// "sluice": the binary itself, or a copy in the VM cache when the guest's
// tmpfs hides it (a binary in /tmp, as 'go run' and tests make). cleanup
// removes the copy.
func GuestBinary(share string) (path string, cleanup func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return "", nil, err
	}
	if !HiddenInGuest(exe, share) && filepath.Base(exe) == "sluice" {
		return exe, func() {}, nil
	}
	if err := os.MkdirAll(DefaultCacheDir, 0o755); err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp(DefaultCacheDir, "bin-")
	if err != nil {
		return "", nil, fmt.Errorf("a copy of %s for the guest: %w", exe, err)
	}
	cleanup = func() { os.RemoveAll(dir) }
	if err := copyExecutable(exe, filepath.Join(dir, "sluice")); err != nil {
		cleanup()
		return "", nil, err
	}
	return filepath.Join(dir, "sluice"), cleanup, nil
}

func copyExecutable(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}
