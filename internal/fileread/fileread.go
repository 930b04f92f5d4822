// SPDX-License-Identifier: Apache-2.0

package fileread

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
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

// ErrKernelFile lets callers and tests tell a refused kernel file apart.
var ErrKernelFile = errors.New("a kernel interface file, not a file sluice reads")

// kernelReadTimeout bounds one ReadKernel: some kernel files block a
// reader until the kernel has something to say (/proc/kmsg), and Go's
// poller turns O_NONBLOCK's EAGAIN on a pollable file into a wait for
// readiness, so only a deadline ends the read. Tests shorten it.
var kernelReadTimeout = 5 * time.Second

// Read returns the contents of the regular file at path, at most limit
// bytes: the files a user names (configs, profiles, keys, facts). A path
// that is not a regular file (after symlinks) is refused before it is
// opened, and so is a file of procfs, sysfs, tracefs and the other kernel
// interface filesystems: they look regular but can block a reader for
// ever (/proc/kmsg, trace_pipe) or never end. A file that grows past
// limit while it is read is refused too.
func Read(path string, limit int64) ([]byte, error) {
	return read(path, limit, false)
}

// ReadKernel reads a file the kernel serves (/proc, /sys) that sluice
// itself names, at most limit bytes (sizes in /proc and /sys are 0 or 4096
// whatever they hold), within kernelReadTimeout.
func ReadKernel(path string, limit int64) ([]byte, error) {
	return read(path, limit, true)
}

func read(path string, limit int64, kernelOK bool) ([]byte, error) {
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
	if !kernelOK {
		// Checked on the open file, before the first read: a path
		// checked by name could be swapped for one of them.
		if fsName := kernelFS(f); fsName != "" {
			return nil, fmt.Errorf("%s is on %s: %w; give the path of a file on disk", path, fsName, ErrKernelFile)
		}
	}
	// Regular files on disk are not pollable and ignore the deadline;
	// kernel files that can block are pollable and honour it.
	f.SetReadDeadline(time.Now().Add(kernelReadTimeout))
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, fmt.Errorf("%s: nothing to read within %s: it blocks its readers", path, kernelReadTimeout)
	}
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, tooLarge(path, limit)
	}
	return data, nil
}

// kernelFilesystems are the filesystems whose files are kernel interfaces
// (statfs f_type, from linux/magic.h), by name for the message.
var kernelFilesystems = map[int64]string{
	0x9fa0: "procfs", 0x62656572: "sysfs", 0x74726163: "tracefs", 0x64626720: "debugfs",
	0x73636673: "securityfs", 0x27e0eb: "cgroupfs", 0x63677270: "cgroup2", 0x62656570: "configfs",
	0xde5e81e4: "efivarfs", 0x6165676c: "pstore", 0xcafe4a11: "bpffs", 0xf97cff8c: "selinuxfs",
	0x42494e4d: "binfmt_misc", 0x1cd1: "devpts",
}

// kernelFS names the kernel filesystem f is on, or "".
func kernelFS(f *os.File) string {
	var st syscall.Statfs_t
	if err := syscall.Fstatfs(int(f.Fd()), &st); err != nil {
		return ""
	}
	return kernelFilesystems[int64(st.Type)]
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
