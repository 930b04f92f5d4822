// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The second test kernel (issue 32, docs/testing.md "The next kernel"):
// the newest Linux Debian ships (trixie-backports) does not run over the
// host's bookworm root. Its out-of-tree modules need that release's
// toolchain, and strongSwan 6 needs trixie's libraries, so it boots over a
// Debian trixie root of its own that scripts/kernel-next.sh builds: the
// root holds the kernel (boot/vmlinuz-*), its modules and headers, gcc 14,
// iproute2 and strongSwan 6. Everything else works as for 6.12: the root
// is shared read-only, the repository read-write at the same path.

// KernelEnv selects the VM kernel when Options.Kernel is empty: unset (or
// "6.12") boots /boot's 6.12 over the host's root; "next" boots the kernel
// in NextRoot over that root.
const KernelEnv = "SLUICE_VM_KERNEL"

// NextRoot is the trixie root scripts/kernel-next.sh builds.
const NextRoot = "/var/cache/sluice/next/root"

// selectedRoot returns the guest root KernelEnv asks for.
func selectedRoot() (string, error) {
	switch v := os.Getenv(KernelEnv); v {
	case "", "6.12":
		return "/", nil
	case "next":
		if !fileExists(filepath.Join(NextRoot, "usr/sbin/swanctl")) {
			return "", fmt.Errorf("%s=next: no trixie root at %s (run: make kernel-next)", KernelEnv, NextRoot)
		}
		return NextRoot, nil
	default:
		return "", fmt.Errorf("%s=%q: want next, 6.12 or nothing", KernelEnv, v)
	}
}

// inRoot is the host path of the guest's path p under root.
func inRoot(root, p string) string { return filepath.Join(root, p) }

// guestView is the guest's path of the host path p, which lies under root.
func guestView(root, p string) string {
	if root == "/" {
		return p
	}
	return "/" + strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
}

// runIn runs a build tool for root: directly over the host's own root,
// else chrooted into root, so that the root's toolchain (gcc 14 for the
// 7.3 headers) builds against the root's headers. The chroot gets a proc
// of its own (objtool reads /proc) in a private mount namespace, gone with
// the build. Paths in args are the guest's (guestView).
func runIn(ctx context.Context, root, name string, args ...string) error {
	if root == "/" {
		return runTool(ctx, name, args...)
	}
	const inChroot = `mount -t proc proc "$0/proc" && exec chroot "$0" "$@"`
	return runTool(ctx, "unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", inChroot, root, name}, args...)...)
}

// defaultKernelIn is defaultKernel for root's /boot.
func defaultKernelIn(root string) (string, error) {
	k, err := defaultKernel(inRoot(root, "/boot"))
	if err != nil && root != "/" {
		return "", fmt.Errorf("no kernel in %s (run: make kernel-next)", inRoot(root, "/boot"))
	}
	return k, err
}
