package fileread

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Limits for the files sluice reads, by kind. They are far above any real
// file and far below what would hurt the host.
const (
	ConfigLimit = 4 << 20  // host.yaml, gateway.yaml, tune and bench profiles
	KeyLimit    = 1 << 20  // key files, PSK files
	StateLimit  = 64 << 20 // sluice's own state: journals, lab.json, swan spec, doctor facts
	ProcLimit   = 64 << 20 // /proc and /sys files (/proc/interrupts grows with CPUs x IRQs)
)

// ErrTooLarge and ErrNotRegular let callers and tests tell the two refusals apart.
var (
	ErrTooLarge   = errors.New("file too large")
	ErrNotRegular = errors.New("not a regular file")
)

// Read returns the contents of the regular file at path, at most limit
// bytes. A path that is not a regular file (after symlinks) is refused
// before it is opened; a file that grows past limit while it is read is
// refused too (sizes in /proc and /sys are 0 or 4096 whatever they hold).
func Read(path string, limit int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := check(path, fi, limit); err != nil {
		return nil, err
	}
	// O_NONBLOCK: if the path was swapped for a FIFO after the Stat, the
	// open still returns at once and the Fstat below refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := check(path, fi, limit); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, tooLarge(path, limit)
	}
	return data, nil
}

func check(path string, fi fs.FileInfo, limit int64) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is %s: %w; sluice reads only regular files", path, kind(fi.Mode()), ErrNotRegular)
	}
	if fi.Size() > limit {
		return tooLarge(path, limit)
	}
	return nil
}

func tooLarge(path string, limit int64) error {
	return fmt.Errorf("%s: %w: larger than the %s limit for this kind of file", path, ErrTooLarge, size(limit))
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return fmt.Sprintf("of type %v", m.Type())
}

func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d-byte", n)
}
