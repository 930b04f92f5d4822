// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/fileread"
)

// maxFixtureFile bounds one committed fixture or golden file (they are a
// few KiB): a test reads them through fileread like any other file.
const maxFixtureFile = 8 << 20

// CopyTree copies the tree at src (symbolic links kept) into a fresh
// temporary directory and returns it, so a test can edit a fixture (mis-pin
// an IRQ) without touching the committed tree.
func CopyTree(tb testing.TB, src string) string {
	tb.Helper()
	dst := tb.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, out)
		case d.IsDir():
			return os.MkdirAll(out, 0o755)
		default:
			b, err := fileread.Read(p, maxFixtureFile)
			if err != nil {
				return err
			}
			return os.WriteFile(out, b, 0o644)
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	return dst
}

// WriteFiles overwrites (or creates) files under root: path -> content, a
// newline added, as sysfs and procfs end their values.
func WriteFiles(tb testing.TB, root string, files map[string]string) {
	tb.Helper()
	for p, v := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(v+"\n"), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// Golden compares got with the file at p, or rewrites it when update is set
// (each package's -update flag).
func Golden(tb testing.TB, p, got string, update bool) {
	tb.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			tb.Fatal(err)
		}
		return
	}
	want, err := fileread.Read(p, maxFixtureFile)
	if err != nil {
		tb.Fatalf("%v (create it with: go test -run %s -update)", err, tb.Name())
	}
	if got != string(want) {
		tb.Errorf("output differs from %s (-want +got):\n%s", p, LineDiff(string(want), got))
	}
}

// LineDiff is a minimal line diff: enough to see which line moved.
func LineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			b.WriteString("-" + wl + "\n+" + gl + "\n")
		}
	}
	return b.String()
}
