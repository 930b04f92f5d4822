// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// netdevsimPath is where the module for a kernel release is cached.
func netdevsimPath(cacheDir, release string) string {
	return filepath.Join(cacheDir, "netdevsim", release, "netdevsim.ko")
}

// NetdevsimModule returns the path of netdevsim.ko built for the VM kernel,
// building it (idempotent, cached by kernel version) if needed.
//
// Debian does not build netdevsim (CONFIG_NETDEVSIM is off), so it is built
// out of tree: only drivers/net/netdevsim/ is extracted from the
// linux-source tarball of the kernel's series, then compiled against the
// installed headers. It depends on psample; load that first in the guest
// (modinfo -F depends lists what to modprobe).
func NetdevsimModule(ctx context.Context, opts Options) (string, error) {
	return cachedModule(ctx, opts, "netdevsim", func(cacheDir, release string) (string, error) {
		return netdevsimPath(cacheDir, release), nil
	}, buildNetdevsim)
}

func buildNetdevsim(ctx context.Context, root, release, dir, final string) error {
	headers := filepath.Join("/lib/modules", release, "build")
	if !fileExists(inRoot(root, filepath.Join(headers, "Makefile"))) {
		return fmt.Errorf("kernel headers missing at %s (run make setup)", inRoot(root, headers))
	}
	src, err := sourceTarball(root, release)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	// --wildcards: the tarball's top directory name (linux-source-6.12) is
	// not needed; '*' matches across '/' in GNU tar.
	if err := runTool(ctx, "tar", "-xJf", src, "-C", work, "--wildcards", "*/drivers/net/netdevsim/*"); err != nil {
		return err
	}
	matches, _ := filepath.Glob(filepath.Join(work, "*", "drivers", "net", "netdevsim"))
	if len(matches) != 1 {
		return fmt.Errorf("drivers/net/netdevsim not found in %s", src)
	}
	m := matches[0]
	if err := runIn(ctx, root, "make", "-C", headers, "M="+guestView(root, m), "CONFIG_NETDEVSIM=m", "modules"); err != nil {
		return err
	}
	// Rename within the cache filesystem: atomic, readers never see a
	// partial module.
	return os.Rename(filepath.Join(m, "netdevsim.ko"), final)
}

// sourceTarball finds /usr/src/linux-source-<major.minor>.tar.xz for a
// release like "6.12.95+deb12-amd64".
func sourceTarball(root, release string) (string, error) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return "", fmt.Errorf("unexpected kernel release %q", release)
	}
	minor := parts[1]
	if i := strings.IndexFunc(minor, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minor = minor[:i]
	}
	series := parts[0] + "." + minor
	p := inRoot(root, "/usr/src/linux-source-"+series+".tar.xz")
	if !fileExists(p) {
		return "", fmt.Errorf("%s missing (run make setup: linux-source from bookworm-backports)", p)
	}
	return p, nil
}

func runTool(ctx context.Context, name string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		s := strings.TrimSpace(out.String())
		if len(s) > 3000 {
			s = "..." + s[len(s)-3000:]
		}
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, s)
	}
	return nil
}

// lockFile takes an exclusive flock; the returned func releases it.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
