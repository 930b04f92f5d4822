// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"vmlinuz-6.12.9", "vmlinuz-6.12.10", -1},
		{"vmlinuz-6.12.95+deb12-amd64", "vmlinuz-6.1.0-30-amd64", 1},
		{"vmlinuz-6.12.10", "vmlinuz-6.12.10", 0},
		{"vmlinuz-6.12", "vmlinuz-6.12.1", -1},
	} {
		if got := compareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestDefaultKernel(t *testing.T) {
	dir := t.TempDir()
	if _, err := defaultKernel(dir); err == nil {
		t.Fatal("empty /boot: want an error")
	}
	touch := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	touch("vmlinuz-6.1.0-30-amd64")
	touch("vmlinuz-6.13.2-amd64")
	if k, _ := defaultKernel(dir); filepath.Base(k) != "vmlinuz-6.13.2-amd64" {
		t.Fatalf("no 6.12: got %s, want the newest", k)
	}
	touch("vmlinuz-6.12.9-amd64")
	touch("vmlinuz-6.12.10-amd64")
	if k, _ := defaultKernel(dir); filepath.Base(k) != "vmlinuz-6.12.10-amd64" {
		t.Fatalf("got %s, want the newest 6.12", k)
	}
}

// fakeBzImage builds just enough of an x86 boot header.
func fakeBzImage(version string) []byte {
	b := make([]byte, 0x1000)
	copy(b[0x202:], "HdrS")
	binary.LittleEndian.PutUint16(b[0x20e:], 0x800-0x200)
	copy(b[0x800:], version+"\x00")
	return b
}

func TestKernelRelease(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "bzImage")
	if err := os.WriteFile(p, fakeBzImage("6.12.95+deb12-amd64 (debian-kernel@lists.debian.org) #1 SMP"), 0o644); err != nil {
		t.Fatal(err)
	}
	if rel, err := kernelRelease(p); err != nil || rel != "6.12.95+deb12-amd64" {
		t.Fatalf("header: got %q, %v", rel, err)
	}
	// Not a bzImage: fall back to the file name.
	p = filepath.Join(dir, "vmlinuz-6.12.1-test")
	if err := os.WriteFile(p, []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if rel, err := kernelRelease(p); err != nil || rel != "6.12.1-test" {
		t.Fatalf("name: got %q, %v", rel, err)
	}
	p = filepath.Join(dir, "kernel")
	if err := os.WriteFile(p, []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := kernelRelease(p); err == nil {
		t.Fatal("no header, no name: want an error")
	}
	// The real one, when installed: header and file name must agree.
	if k, err := defaultKernel("/boot"); err == nil && strings.HasPrefix(filepath.Base(k), "vmlinuz-") {
		rel, err := kernelRelease(k)
		if err != nil || "vmlinuz-"+rel != filepath.Base(k) {
			t.Errorf("%s: release %q, %v", k, rel, err)
		}
	}
}

func TestSourceTarball(t *testing.T) {
	if _, err := sourceTarball("/", "nonsense"); err == nil {
		t.Error("want an error for a release without a series")
	}
	_, err := sourceTarball("/", "99.7.1-x")
	if err == nil || !strings.Contains(err.Error(), "linux-source-99.7.tar.xz") {
		t.Errorf("err = %v, want it to name linux-source-99.7.tar.xz", err)
	}
}

// TestNextRootPaths: the next kernel's root is the guest's "/": host paths
// under it map to the guest's, and the environment picks it.
func TestNextRootPaths(t *testing.T) {
	if got := guestView(NextRoot, NextRoot+"/var/cache/sluice/vm/netdevsim/x/netdevsim.ko"); got != "/var/cache/sluice/vm/netdevsim/x/netdevsim.ko" {
		t.Errorf("guestView = %q", got)
	}
	if got := guestView("/", "/var/cache/sluice/vm/a.ko"); got != "/var/cache/sluice/vm/a.ko" {
		t.Errorf("guestView on the host root = %q", got)
	}
	if got := inRoot(NextRoot, "/lib/modules"); got != NextRoot+"/lib/modules" {
		t.Errorf("inRoot = %q", got)
	}
	t.Setenv(KernelEnv, "")
	if r, err := selectedRoot(); err != nil || r != "/" {
		t.Errorf("unset: %q, %v; want the host's root", r, err)
	}
	t.Setenv(KernelEnv, "7.3")
	if _, err := selectedRoot(); err == nil || !strings.Contains(err.Error(), "want next") {
		t.Errorf("an unknown value: %v, want an error naming the choices", err)
	}
	t.Setenv(KernelEnv, "next")
	r, err := selectedRoot()
	switch {
	case fileExists(filepath.Join(NextRoot, "usr/sbin/swanctl")):
		if err != nil || r != NextRoot {
			t.Errorf("next: %q, %v; want %s", r, err, NextRoot)
		}
	case err == nil || !strings.Contains(err.Error(), "make kernel-next"):
		t.Errorf("next without the root: %v, want the fix (make kernel-next)", err)
	}
}
