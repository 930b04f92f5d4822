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
		// /proc reports size 0: the limit holds on what is read.
		{"/proc/self/status", 16, ErrTooLarge, "larger than the 16-byte limit"},
		{"/proc/self/status", 1 << 20, nil, ""},
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
