// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Options for one VM run. Zero values mean defaults.
type Options struct {
	Kernel   string        // vmlinuz path; default newest /boot/vmlinuz-6.12*, else newest /boot/vmlinuz-*
	CPUs     int           // default 2
	MemoryMB int           // default 2048
	Timeout  time.Duration // whole run incl. boot; default 10m; qemu is killed on expiry and Run returns an error saying so
	Share    string        // host dir mounted read-write at the same path in the guest; default: repo root (found by walking up to go.mod) or cwd
	Dir      string        // working directory of the command in the guest; default Share
	Env      []string      // extra env for the command
	Stdout   io.Writer     // guest command output, stdout and stderr (and only that — kernel noise suppressed with quiet loglevel); default os.Stdout
	CacheDir string        // default /var/cache/sluice/vm under Root (initramfs, netdevsim build)
	// Root is the host directory the guest mounts read-only as its root
	// filesystem, with the kernel's modules under it: default "/", the
	// host's own, or NextRoot when KernelEnv is "next" (next.go).
	Root string

	// Log receives the harness's own progress and timing lines ("guest
	// ready after 7.9s"); nil means silent. Kept apart from Stdout so that
	// the command's output stays exactly what the command printed.
	Log io.Writer
	// Console, when set, receives the raw serial console (kernel messages,
	// init's messages, sentinels): for debugging a guest that fails to boot.
	Console io.Writer
	// KernelArgs are appended to the kernel command line (e.g. "loglevel=7"
	// together with Console to see kernel messages).
	KernelArgs string
}

const (
	defaultCPUs     = 2
	defaultMemoryMB = 2048
	defaultTimeout  = 10 * time.Minute
	defaultCacheDir = "/var/cache/sluice/vm"
)

// withDefaults returns a copy of o with every zero field filled in. It fails
// only when no kernel can be found or a directory cannot be resolved.
func (o Options) withDefaults() (Options, error) {
	if o.CPUs <= 0 {
		o.CPUs = defaultCPUs
	}
	if o.MemoryMB <= 0 {
		o.MemoryMB = defaultMemoryMB
	}
	if o.Timeout <= 0 {
		o.Timeout = defaultTimeout
	}
	if o.Root == "" {
		r, err := selectedRoot()
		if err != nil {
			return o, fmt.Errorf("testlab: %w", err)
		}
		o.Root = r
	}
	if o.CacheDir == "" {
		// Under the root: the guest reads the modules built here.
		o.CacheDir = inRoot(o.Root, defaultCacheDir)
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Kernel == "" {
		k, err := defaultKernelIn(o.Root)
		if err != nil {
			return o, err
		}
		o.Kernel = k
	}
	if o.Share == "" {
		s, err := repoRoot()
		if err != nil {
			return o, err
		}
		o.Share = s
	}
	// The guest mounts the share at the same path, so it must be absolute
	// and free of symlinks (the guest resolves them in its own tree).
	share, err := absReal(o.Share)
	if err != nil {
		return o, fmt.Errorf("testlab: share %s: %w", o.Share, err)
	}
	o.Share = share
	if o.Dir == "" {
		o.Dir = o.Share
	} else if !filepath.IsAbs(o.Dir) {
		o.Dir = filepath.Join(o.Share, o.Dir)
	}
	return o, nil
}

func absReal(p string) (string, error) {
	p, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(p)
}

// repoRoot walks up from the working directory to the nearest go.mod: the
// default share, so that `go test` in any package shares the whole module.
// Without a go.mod the working directory itself is shared.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if d == filepath.Dir(d) {
			return wd, nil
		}
	}
}
