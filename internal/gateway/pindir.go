// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"sluice/internal/fastpath"
	"sluice/internal/trust"
)

// preparePinDir makes sure dir is a pin dir this daemon can trust, creating
// it (0700) when missing, and says whether it did. Every name in it is a
// map or link the daemon adopts and acts on, so it must be ours and
// writable by us only (trust.Private), its parents as trust.Shared, and it
// must hold no symlink: a planted link_x0 pointing at another gateway's
// link made a start replace that gateway's program. A directory another
// user created is refused with its owner, never reported as "another
// sluice gateway".
func preparePinDir(dir string) (created bool, err error) {
	if err := fastpath.EnsureBPFFS(dir); err != nil {
		return false, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return false, err
	}
	switch err := os.Mkdir(dir, 0o700); {
	case err == nil:
		created = true
		// The API socket's bind sets a narrower umask for a moment, and
		// the pin watcher may create the directory in that moment.
		if err := os.Chmod(dir, 0o700); err != nil {
			return false, err
		}
	case !errors.Is(err, os.ErrExist):
		return false, err
	}
	if err := trust.CheckDir(dir, trust.Private); err != nil {
		return false, fmt.Errorf("pin-dir: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if e.Type()&os.ModeSymlink != 0 {
			return false, fmt.Errorf("pin-dir: %s is a symlink: sluice never follows symlinks in its pin dir (one could point at another gateway's link or map); remove it",
				filepath.Join(dir, e.Name()))
		}
	}
	return created, nil
}
