// SPDX-License-Identifier: Apache-2.0

package trust

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrUntrusted lets callers and tests tell a refused directory apart.
var ErrUntrusted = errors.New("untrusted directory")

// Mode says how strict the check of the directory itself is.
type Mode int

const (
	// Shared: the directory may belong to root or to us, and may be
	// writable by others only with the sticky bit (/tmp, /run/user):
	// others then cannot remove or rename what we put there.
	Shared Mode = iota
	// Private: the directory must belong to us and be writable by us
	// only (the pin dir: every name in it is one we act on).
	Private
)

// CheckDir refuses dir when a user other than root and us could change
// what its path names: dir or one of its parents is owned by another
// user, or writable by group or others without the sticky bit (for a
// Private dir, at all). dir must exist; a symlink as dir itself is
// refused, symlinks among the parents are resolved first (/var/run).
func CheckDir(dir string, m Mode) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if st.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symlink: %w; give the directory itself", dir, ErrUntrusted)
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(filepath.Clean(dir)))
	if err != nil {
		return err
	}
	var stat unix.Stat_t
	if err := unix.Lstat(dir, &stat); err != nil {
		return err
	}
	if err := checkStat(dir, &stat, m); err != nil {
		return err
	}
	for p := parent; ; p = filepath.Dir(p) {
		if err := unix.Stat(p, &stat); err != nil {
			return err
		}
		if err := checkStat(p, &stat, Shared); err != nil {
			return fmt.Errorf("%w (a parent of %s)", err, dir)
		}
		if p == "/" {
			return nil
		}
	}
}

// CheckFd is CheckDir's test of the directory itself, on an open
// descriptor: what was checked by path is what is used.
func CheckFd(f *os.File, m Mode) error {
	var stat unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &stat); err != nil {
		return err
	}
	return checkStat(f.Name(), &stat, m)
}

func checkStat(path string, st *unix.Stat_t, m Mode) error {
	me := uint32(os.Geteuid())
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a directory: %w", path, ErrUntrusted)
	}
	switch {
	case m == Private && st.Uid != me:
		return fmt.Errorf("%s belongs to uid %d, not to this process (uid %d): %w; remove it (the daemon creates it) or chown it", path, st.Uid, me, ErrUntrusted)
	case st.Uid != 0 && st.Uid != me:
		return fmt.Errorf("%s belongs to uid %d: %w; that user could replace what the daemon puts there; use a directory owned by root", path, st.Uid, ErrUntrusted)
	case m == Private && st.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by group or others (mode %04o): %w; chmod go-w it or remove it (the daemon creates it 0700)", path, st.Mode&0o7777, ErrUntrusted)
	case st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
		return fmt.Errorf("%s is writable by group or others without the sticky bit (mode %04o): %w; other users could swap what the daemon puts there; chmod go-w it or use another directory", path, st.Mode&0o7777, ErrUntrusted)
	}
	return nil
}

// OpenDir opens dir as a directory without following a symlink there and
// checks the open directory (owner, mode) as CheckDir does.
func OpenDir(dir string, m Mode) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		// O_NOFOLLOW|O_DIRECTORY on a symlink fails with ELOOP or ENOTDIR.
		if fi, lerr := os.Lstat(dir); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s is a symlink: %w; give the directory itself", dir, ErrUntrusted)
		}
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	if err := CheckFd(f, m); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
