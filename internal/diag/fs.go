// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"sluice/internal/fileread"
)

// FS reads the kernel's pseudo files under Root ("/" on a live host, a
// fixture tree in tests). Paths given to its methods are absolute as on a
// live host ("/sys/class/net").
type FS struct {
	Root string
}

// Host is the live host's file system.
var Host = FS{Root: "/"}

func (fs FS) path(p string) string {
	if fs.Root == "" || fs.Root == "/" {
		return p
	}
	return filepath.Join(fs.Root, p)
}

// ReadString returns the file's content without surrounding white space.
func (fs FS) ReadString(p string) (string, error) {
	b, err := fileread.ReadKernel(fs.path(p), fileread.ProcLimit)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// ReadInt reads a decimal or 0x-prefixed integer file.
func (fs FS) ReadInt(p string) (int64, error) {
	s, err := fs.ReadString(p)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", p, s)
	}
	return v, nil
}

// Names lists the entries of a directory, sorted; a missing directory is
// an empty list.
func (fs FS) Names(p string) []string {
	ents, err := os.ReadDir(fs.path(p))
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// Exists reports whether p exists (following symbolic links).
func (fs FS) Exists(p string) bool {
	_, err := os.Stat(fs.path(p))
	return err == nil
}

// LinkBase returns the last element of a symbolic link's target (a
// driver's name from .../driver), or "" when p is not a link.
func (fs FS) LinkBase(p string) string {
	t, err := os.Readlink(fs.path(p))
	if err != nil {
		return ""
	}
	return filepath.Base(t)
}

// WriteString writes v to a pseudo file (sysctl, smp_affinity_list...).
func (fs FS) WriteString(p, v string) error {
	f, err := os.OpenFile(fs.path(p), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(v); err != nil {
		f.Close()
		return fmt.Errorf("write %q to %s: %w", v, p, err)
	}
	return f.Close()
}
