// SPDX-License-Identifier: Apache-2.0

package install

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"sluice/internal/testutil"
	"strings"
	"testing"
)

// freshRoot is the Debian bookworm root (minbase plus systemd) that
// scripts/setup.sh makes with debootstrap; the test mounts an overlay on it,
// so it stays untouched.
const freshRoot = "/var/cache/sluice/pkgroot/bookworm"

// packages builds the packages once per test binary (scripts/package.sh),
// or takes them from SLUICE_PACKAGE_DIR when a build is already there.
func packages(t *testing.T) (deb, rpm string) {
	t.Helper()
	dir := os.Getenv("SLUICE_PACKAGE_DIR")
	if dir == "" {
		cmd := exec.Command("bash", "scripts/package.sh")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scripts/package.sh: %v\n%s", err, out)
		}
		dir = "../../bin/package"
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "sluice_*.deb"))
	rpms, _ := filepath.Glob(filepath.Join(dir, "sluice-*.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("%s holds %d .deb and %d .rpm, want one of each", dir, len(debs), len(rpms))
	}
	deb, _ = filepath.Abs(debs[0])
	rpm, _ = filepath.Abs(rpms[0])
	return deb, rpm
}

func need(t *testing.T, tools ...string) {
	t.Helper()
	testutil.RequireRoot(t, "mounts an overlay root and chroots into it")
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: run 'make setup'", tool)
		}
	}
}

// TestPackages installs the .deb into a fresh root (an overlay over the
// cached debootstrap root, in a mount namespace of its own): `sluice
// version` runs, every unit passes the root's `systemd-analyze verify`,
// installing changes nothing the package does not own and enables no unit,
// and purging leaves the root as it was (testdata/install.sh). lintian finds
// no error in the .deb, and the .rpm holds the same parts with no scripts.
func TestPackages(t *testing.T) {
	need(t, "unshare", "lintian", "rpm")
	if _, err := os.Stat(filepath.Join(freshRoot, "usr/bin/systemd-analyze")); err != nil {
		t.Fatalf("no fresh root at %s: run 'make setup' (it runs debootstrap once)", freshRoot)
	}
	deb, rpm := packages(t)

	t.Run("deb", func(t *testing.T) {
		t.Parallel()
		out, err := exec.Command("unshare", "--mount", "--propagation", "private",
			"bash", "testdata/install.sh", freshRoot, deb, t.TempDir()).CombinedOutput()
		t.Logf("%s", out)
		if err != nil {
			t.Fatalf("install test: %v", err)
		}
	})
	t.Run("lintian", func(t *testing.T) {
		t.Parallel() // ~40 s of perl: beside the install, not after it
		out, err := exec.Command("lintian", "--fail-on", "error", "--tag-display-limit", "0", deb).CombinedOutput()
		if err != nil {
			t.Fatalf("lintian: %v\n%s", err, out)
		}
	})
	t.Run("units", func(t *testing.T) {
		list, err := exec.Command("dpkg-deb", "-c", deb).Output()
		if err != nil {
			t.Fatalf("dpkg-deb -c: %v", err)
		}
		units, _ := filepath.Glob("../../contrib/systemd/*.service")
		if len(units) == 0 {
			t.Fatal("no units in contrib/systemd")
		}
		for _, u := range units {
			if !strings.Contains(string(list), " ./lib/systemd/system/"+filepath.Base(u)+"\n") {
				t.Errorf("the .deb lacks %s: every unit in contrib/systemd must ship", filepath.Base(u))
			}
		}
	})
	t.Run("static", func(t *testing.T) {
		bins, _ := filepath.Glob(filepath.Join(filepath.Dir(deb), "sluice-*-linux-*"))
		if len(bins) != 1 {
			t.Fatalf("want one static binary beside the packages, found %v", bins)
		}
		f, err := elf.Open(bins[0])
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s is dynamically linked (%v): build it with CGO_ENABLED=0", bins[0], p.Type)
			}
		}
		out, err := exec.Command(bins[0], "version", "--json").Output()
		if err != nil {
			t.Fatalf("%s version: %v", bins[0], err)
		}
		ver := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(bins[0]), "sluice-"), "-linux-amd64")
		if !strings.Contains(string(out), `"version": "`+ver+`"`) || strings.Contains(string(out), `"commit": "unknown"`) {
			t.Errorf("the binary is not stamped with version %s and a commit:\n%s", ver, out)
		}
	})
	t.Run("rpm", func(t *testing.T) {
		list, err := exec.Command("rpm", "-qlp", rpm).Output()
		if err != nil {
			t.Fatalf("rpm -qlp: %v", err)
		}
		for _, want := range []string{"/usr/sbin/sluice", "/usr/lib/systemd/system/sluice-gateway.service",
			"/usr/share/man/man8/sluice.8.gz", "/usr/share/bash-completion/completions/sluice",
			"/usr/share/zsh/site-functions/_sluice", "/usr/share/fish/vendor_completions.d/sluice.fish",
			"/usr/share/doc/sluice/examples/gateway.yaml", "/usr/share/licenses/sluice/LICENSE"} {
			if !strings.Contains(string(list), want+"\n") {
				t.Errorf("the .rpm lacks %s", want)
			}
		}
		scripts, err := exec.Command("rpm", "-qp", "--scripts", rpm).Output()
		if err != nil || strings.TrimSpace(string(scripts)) != "" {
			t.Errorf("the .rpm has scripts (installing must run nothing): %v\n%s", err, scripts)
		}
	})
	t.Run("rpm-root", func(t *testing.T) {
		// An empty root, no distribution in it: the static binary must run
		// there, and erasing must take every sluice path with it (rpm removes
		// only the directories a package owns).
		root := t.TempDir()
		for _, args := range [][]string{{"--initdb"}, {"-i", "--nodeps", rpm}} {
			if out, err := exec.Command("rpm", append([]string{"--root", root}, args...)...).CombinedOutput(); err != nil {
				t.Fatalf("rpm %v: %v\n%s", args, err, out)
			}
		}
		if out, err := exec.Command("chroot", root, "/usr/sbin/sluice", "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "sluice ") {
			t.Errorf("sluice version in an empty root: %v\n%s", err, out)
		}
		if out, err := exec.Command("rpm", "--root", root, "-e", "sluice").CombinedOutput(); err != nil {
			t.Fatalf("rpm -e: %v\n%s", err, out)
		}
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			rel := strings.TrimPrefix(p, root)
			switch {
			case err != nil:
				return err
			case strings.Contains(rel, "rpmdb") || strings.HasPrefix(rel, "/var/lib/rpm"):
				return nil // rpm's own database (Debian's rpm keeps it in ~/.rpmdb)
			case !d.IsDir() || strings.Contains(rel, "sluice"):
				t.Errorf("left after rpm -e: %s", rel)
			}
			return nil
		})
	})
}
