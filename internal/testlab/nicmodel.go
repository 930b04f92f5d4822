// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"sluice/kmod"
)

// IPPacketOffload is an iproute2 (6.15, from bookworm-backports) that
// knows "offload packet"; scripts/setup.sh unpacks it here, beside the
// system's 6.1. Run passes it to the guest as SLUICE_IP_PACKET.
const IPPacketOffload = "/usr/local/lib/sluice/iproute2-bpo/bin/ip"

// nicmodelPath is where the module for a kernel release and a source
// digest is cached: a change to the C sources builds a new module.
func nicmodelPath(cacheDir, release string) (string, error) {
	sum, err := nicmodelDigest()
	if err != nil {
		return "", err
	}
	return filepath.Join(cacheDir, "nicmodel", release, sum[:16], "nicmodel.ko"), nil
}

// nicmodelDigest is SHA-256 over the embedded source files (names and
// contents, in name order).
func nicmodelDigest() (string, error) {
	var names []string
	if err := fs.WalkDir(kmod.Nicmodel, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
		}
		return err
	}); err != nil {
		return "", err
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := kmod.Nicmodel.ReadFile(n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// NicmodelModule returns the path of nicmodel.ko, the packet-offload NIC
// model (kmod/nicmodel), built for the VM kernel; it builds it (about 10 s,
// cached by kernel release and source digest) if needed. The sources are
// embedded in the binary, so any sluice binary can build its own model.
func NicmodelModule(ctx context.Context, opts Options) (string, error) {
	return cachedModule(ctx, opts, "nicmodel", nicmodelPath, buildNicmodel)
}

func buildNicmodel(ctx context.Context, root, release, dir, final string) error {
	headers := filepath.Join("/lib/modules", release, "build")
	if !fileExists(inRoot(root, filepath.Join(headers, "Makefile"))) {
		return fmt.Errorf("kernel headers missing at %s (run make setup)", inRoot(root, headers))
	}
	work, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := os.CopyFS(work, kmod.Nicmodel); err != nil {
		return err
	}
	src := filepath.Join(work, "nicmodel")
	if err := runIn(ctx, root, "make", "-C", headers, "M="+guestView(root, src), "modules"); err != nil {
		return err
	}
	return os.Rename(filepath.Join(src, "nicmodel.ko"), final)
}
