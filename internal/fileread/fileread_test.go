// SPDX-License-Identifier: Apache-2.0

package fileread

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(small, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path    string
		limit   int64
		wantErr error
		wantMsg string
	}{
		{small, 10, nil, ""},
		{link, 10, nil, ""},
		{small, 9, ErrTooLarge, small + ": file too large: larger than the 9-byte limit"},
		{"/dev/zero", 1 << 20, ErrNotRegular, "/dev/zero is a character device"},
		{fifo, 1 << 20, ErrNotRegular, fifo + " is a named pipe (FIFO)"},
		{dir, 1 << 20, ErrNotRegular, dir + " is a directory"},
		// Kernel files are refused before the first read: /proc/kmsg
		// blocked 'gateway explain -c /proc/kmsg' for ever.
		{"/proc/kmsg", 1 << 20, ErrKernelFile, "/proc/kmsg is on procfs"},
		{"/proc/self/status", 1 << 20, ErrKernelFile, "/proc/self/status is on procfs"},
		{"/sys/kernel/mm/transparent_hugepage/enabled", 1 << 20, ErrKernelFile, "is on sysfs"},
	} {
		done := make(chan struct{})
		var data []byte
		var err error
		go func() { data, err = Read(tc.path, tc.limit); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("Read(%s) blocked", tc.path)
		}
		if tc.wantErr == nil {
			if err != nil || len(data) == 0 {
				t.Errorf("Read(%s, %d) = %d bytes, %v", tc.path, tc.limit, len(data), err)
			}
			continue
		}
		if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantMsg) {
			t.Errorf("Read(%s, %d): %v, want %v with %q", tc.path, tc.limit, err, tc.wantErr, tc.wantMsg)
		}
	}
}

// ReadKernel reads what the kernel serves, within its limit and deadline:
// a file that blocks its readers (/proc/kmsg) ends with an error.
func TestReadKernel(t *testing.T) {
	old := kernelReadTimeout
	kernelReadTimeout = 300 * time.Millisecond
	t.Cleanup(func() { kernelReadTimeout = old })
	// /proc reports size 0: the limit holds on what is read.
	if _, err := ReadKernel("/proc/self/status", 16); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadKernel(/proc/self/status, 16): %v, want %v", err, ErrTooLarge)
	}
	if b, err := ReadKernel("/proc/self/status", 1<<20); err != nil || len(b) == 0 {
		t.Errorf("ReadKernel(/proc/self/status): %d bytes, %v", len(b), err)
	}
	if os.Geteuid() != 0 {
		return // mounting tracefs needs root
	}
	// trace_pipe blocks its readers until something is traced, like
	// /proc/kmsg (which this test must not drain: syslog reads it).
	dir := t.TempDir()
	if err := syscall.Mount("nodev", dir, "tracefs", 0, ""); err != nil {
		t.Fatalf("mounting tracefs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	done := make(chan error, 1)
	go func() {
		_, err := ReadKernel(filepath.Join(dir, "trace_pipe"), 1<<20)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "blocks its readers") {
			t.Errorf("ReadKernel(trace_pipe): %v, want the deadline's error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ReadKernel(trace_pipe) blocked past its deadline")
	}
}
