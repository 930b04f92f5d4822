// SPDX-License-Identifier: Apache-2.0

package trust

import (
	"errors"
	"os"
	"path/filepath"
	"sluice/internal/testutil"
	"strings"
	"testing"
)

// Each way a directory can let another user change what its names point
// at is refused, with the directory and the fix; root's and sticky ones
// pass.
func TestCheckDir(t *testing.T) {
	testutil.RequireRoot(t, "directories owned by another user")
	base := t.TempDir()
	mk := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		os.Chown(p, uid, uid)
		return p
	}
	private := mk("private", 0o700, 0)
	sticky := mk("sticky", os.ModeSticky|0o777, 0)
	open := mk("open", 0o777, 0)
	groupW := mk("groupw", 0o770, 0)
	foreign := mk("foreign", 0o700, 65534)
	underOpen := mk("open/child", 0o700, 0)
	link := filepath.Join(base, "link")
	os.Symlink(private, link)
	for _, tc := range []struct {
		dir  string
		mode Mode
		want string // "" passes
	}{
		{private, Private, ""},
		{private, Shared, ""},
		{sticky, Shared, ""},
		{sticky, Private, "writable by group or others"},
		{open, Shared, "without the sticky bit (mode 0777)"},
		{groupW, Private, "writable by group or others (mode 0770)"},
		{foreign, Shared, "belongs to uid 65534"},
		{foreign, Private, "belongs to uid 65534, not to this process"},
		{underOpen, Private, "(a parent of " + underOpen + ")"},
		{link, Private, "is a symlink"},
	} {
		err := CheckDir(tc.dir, tc.mode)
		if tc.want == "" {
			if err != nil {
				t.Errorf("CheckDir(%s, %d): %v", tc.dir, tc.mode, err)
			}
		} else if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckDir(%s, %d): %v, want %q", tc.dir, tc.mode, err, tc.want)
		}
	}
	if _, err := OpenDir(link, Private); !errors.Is(err, ErrUntrusted) {
		t.Errorf("OpenDir of a symlink: %v", err)
	}
	if f, err := OpenDir(private, Private); err != nil {
		t.Errorf("OpenDir(%s): %v", private, err)
	} else {
		f.Close()
	}
}
