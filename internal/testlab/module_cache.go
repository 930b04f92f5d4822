// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// cachedModule returns the path of an out-of-tree module built for the VM
// kernel, building it once: path names the cached .ko for a kernel release,
// build compiles it into dir (under root, with root's toolchain: runIn) and
// renames it to final. One build at a time
// per release: a second process waits on the lock, then finds the module.
func cachedModule(ctx context.Context, opts Options, name string,
	path func(cacheDir, release string) (string, error),
	build func(ctx context.Context, root, release, dir, final string) error) (string, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return "", err
	}
	release, err := kernelRelease(o.Kernel)
	if err != nil {
		return "", fmt.Errorf("testlab: %w", err)
	}
	final, err := path(o.CacheDir, release)
	if err != nil {
		return "", fmt.Errorf("testlab: %s source: %w", name, err)
	}
	if fileExists(final) {
		return final, nil
	}
	dir := filepath.Dir(final)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("testlab: %w", err)
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		return "", fmt.Errorf("testlab: %w", err)
	}
	defer unlock()
	if fileExists(final) {
		return final, nil
	}
	t0 := time.Now()
	if err := build(ctx, o.Root, release, dir, final); err != nil {
		return "", fmt.Errorf("testlab: building %s for %s: %w", name, release, err)
	}
	o.logf("built %s in %.1fs", final, time.Since(t0).Seconds())
	return final, nil
}
