// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteEtcArchive(t *testing.T) {
	src := t.TempDir()
	mustDo := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustDo(os.MkdirAll(filepath.Join(src, "netns", "x"), 0o750))
	mustDo(os.WriteFile(filepath.Join(src, "hosts"), []byte("127.0.0.1 localhost\n"), 0o644))
	mustDo(os.WriteFile(filepath.Join(src, "netns", "x", "resolv.conf"), []byte("nameserver 1.1.1.1\n"), 0o600))
	mustDo(os.Symlink("/proc/self/mounts", filepath.Join(src, "mtab")))

	dst := filepath.Join(t.TempDir(), "etc.tar")
	mustDo(writeEtcArchive(src, dst))
	f, err := os.Open(dst)
	mustDo(err)
	defer f.Close()
	type entry struct {
		typ  byte
		mode int64
		body string
		link string
	}
	got := map[string]entry{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		mustDo(err)
		body, err := io.ReadAll(tr)
		mustDo(err)
		got[h.Name] = entry{h.Typeflag, h.Mode & 0o7777, string(body), h.Linkname}
	}
	want := map[string]entry{
		"hosts":               {tar.TypeReg, 0o644, "127.0.0.1 localhost\n", ""},
		"mtab":                {tar.TypeSymlink, 0o777, "", "/proc/self/mounts"},
		"netns/":              {tar.TypeDir, 0o750, "", ""},
		"netns/x/":            {tar.TypeDir, 0o750, "", ""},
		"netns/x/resolv.conf": {tar.TypeReg, 0o600, "nameserver 1.1.1.1\n", ""},
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s missing from the archive (have %v)", name, got)
			continue
		}
		// The symlink's mode is whatever lstat says; only check files/dirs.
		if w.typ == tar.TypeSymlink {
			g.mode = w.mode
		}
		if g != w {
			t.Errorf("%s: got %+v, want %+v", name, g, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("archive has %d entries, want %d: %v", len(got), len(want), got)
	}
}
