// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// initScript is the guest's PID 1. It is static: everything that varies per
// run goes through the control share, so one cached initramfs serves all
// runs of a kernel.
//
//go:embed init.sh
var initScript string

// modprobeHelper is what /proc/sys/kernel/modprobe points at (see init.sh).
const modprobeHelper = "#!/bin/sh\nexec /bin/chroot /newroot /sbin/modprobe \"$@\"\n"

// initramfsFormat is bumped when buildInitramfs changes in a way the hashed
// inputs do not show.
const initramfsFormat = "1"

// busyboxCandidates: busybox-static installs /bin/busybox; a dynamically
// linked busybox cannot run in the initramfs, which has no libc.
var busyboxCandidates = []string{"/bin/busybox", "/usr/bin/busybox", "/sbin/busybox", "/usr/sbin/busybox"}

func findStaticBusybox() (string, error) {
	for _, p := range busyboxCandidates {
		if isStaticELF(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("no statically linked busybox (looked in %s): run make setup (busybox-static)", strings.Join(busyboxCandidates, ", "))
}

// isStaticELF: an ELF executable without a PT_INTERP program header needs
// no dynamic loader.
func isStaticELF(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// initramfs returns the path of the cached initramfs for release, building
// it first when missing.
func initramfs(cacheDir, root, release string) (string, error) {
	mods, err := bootModuleFiles(root, release)
	if err != nil {
		return "", err
	}
	return cachedInitramfs(cacheDir, release, initScript, mods)
}

// GuestInitramfs returns a cached initramfs for kernel release whose PID 1
// is init (a busybox sh script; every busybox applet is in /bin) and which
// carries the named modules and their dependencies, decompressed, in
// /modules, their load order in /modules/order (init must insmod them).
// It is for guests other than the test VM, e.g. a libvirt domain booted by
// a host test.
func GuestInitramfs(cacheDir, release, init string, modules []string) (string, error) {
	mods, err := moduleFiles("/", release, modules)
	if err != nil {
		return "", fmt.Errorf("testlab: %w", err)
	}
	p, err := cachedInitramfs(cacheDir, release, init, mods)
	if err != nil {
		return "", fmt.Errorf("testlab: %w", err)
	}
	return p, nil
}

// cachedInitramfs returns the path of the cached initramfs with init and
// mods, building it first when missing. The cache key covers the kernel
// release, the init script and helper, and the identity (size, mtime) of
// busybox and the module files, so a changed script or reinstalled kernel
// gets a new file.
func cachedInitramfs(cacheDir, release, init string, mods []string) (string, error) {
	busybox, err := findStaticBusybox()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "format %s\nrelease %s\n", initramfsFormat, release)
	fmt.Fprintf(h, "init %q\nhelper %q\n", init, modprobeHelper)
	for _, p := range append([]string{busybox}, mods...) {
		st, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "file %s %d %d\n", p, st.Size(), st.ModTime().UnixNano())
	}
	path := filepath.Join(cacheDir, fmt.Sprintf("initramfs-%s-%s.cpio.gz", release, hex.EncodeToString(h.Sum(nil))[:16]))
	if _, err := os.Stat(path); err == nil {
		// Record the use: pruneInitramfs spares recently used files.
		now := time.Now()
		os.Chtimes(path, now, now)
		return path, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", err
	}
	if err := buildInitramfs(path, busybox, init, mods); err != nil {
		return "", fmt.Errorf("building initramfs: %w", err)
	}
	pruneInitramfs(cacheDir, path)
	return path, nil
}

// pruneInitramfs removes initramfs files other than keep that have not been
// used for a while: superseded by a new init script or kernel. The grace
// period spares a file another process has just chosen and is about to
// hand to qemu; a process that finds its file gone simply rebuilds it.
func pruneInitramfs(cacheDir, keep string) {
	old, _ := filepath.Glob(filepath.Join(cacheDir, "initramfs-*.cpio.gz"))
	for _, p := range old {
		if st, err := os.Stat(p); err == nil && p != keep && time.Since(st.ModTime()) > 10*time.Minute {
			os.Remove(p)
		}
	}
}

// buildInitramfs writes a temp file next to path and renames it into place:
// two test processes racing to build the same key each write their own temp
// file and the last rename wins with identical content; neither ever sees a
// partial file.
func buildInitramfs(path, busybox, init string, mods []string) (err error) {
	applets, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("%s --list: %w", busybox, err)
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".initramfs-*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	zw := gzip.NewWriter(tmp)
	c := newCpioWriter(zw)
	for _, d := range []string{"bin", "dev", "proc", "sys", "modules", "ctl", "newroot"} {
		c.Dir(d, 0o755)
	}
	// The kernel opens /dev/console for init before anything is mounted.
	c.CharDev("dev/console", 0o600, 5, 1)
	c.File("init", 0o755, []byte(init))
	c.File("bin/busybox", 0o755, bb)
	for _, a := range strings.Fields(string(applets)) {
		if a != "busybox" && !strings.Contains(a, "/") {
			c.Symlink("bin/"+a, "busybox")
		}
	}
	c.File("bin/sluice-modprobe", 0o755, []byte(modprobeHelper))
	var order []string
	for _, m := range mods {
		data, err := readModule(m)
		if err != nil {
			return err
		}
		name := moduleName(m) + ".ko"
		c.File("modules/"+name, 0o644, data)
		order = append(order, name)
	}
	c.File("modules/order", 0o644, []byte(strings.Join(order, "\n")+"\n"))
	if err := c.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
