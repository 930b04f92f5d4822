// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/testutil"
	"sluice/internal/trust"
)

// asNobody runs a command as uid/gid 65534 (a real other user, no
// capabilities) and returns its combined output.
func asNobody(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("setpriv", append([]string{"--reuid", "65534", "--regid", "65534", "--clear-groups", "--inh-caps=-all"}, args...)...).CombinedOutput()
	return string(out), err
}

// trustedTemp is a directory of root's that uid 65534 can reach.
func trustedTemp(t *testing.T, mode os.FileMode) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

// An api-socket directory another user can write lets that user swap what
// root acts on between two steps (a 0600 file of root's became 0660 that
// way) or replace the socket: such directories, and directories of other
// users, are refused before anything is created, as sshd's StrictModes
// does; a sticky world-writable one (/tmp) is fine.
func TestSocketDirectoryMustBeTrusted(t *testing.T) {
	testutil.RequireRoot(t, "directories of another user")
	open := trustedTemp(t, 0o777)
	sticky := trustedTemp(t, os.ModeSticky|0o777)
	foreign := trustedTemp(t, 0o755)
	os.Chown(foreign, 65534, 65534)
	under := filepath.Join(open, "sub")
	os.Mkdir(under, 0o755)
	for _, tc := range []struct{ dir, want string }{
		{open, "writable by group or others without the sticky bit (mode 0777)"},
		{foreign, "belongs to uid 65534"},
		{under, "(a parent of " + under + ")"},
	} {
		l, err := Listen(filepath.Join(tc.dir, "sluice.sock"), SocketOptions{UID: -1, GID: -1})
		if err == nil {
			l.Close()
		}
		if !errors.Is(err, trust.ErrUntrusted) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Listen in %s: %v, want a refusal with %q", tc.dir, err, tc.want)
		}
		if entries, _ := os.ReadDir(tc.dir); len(entries) > 0 && tc.dir != open {
			t.Errorf("the refused Listen left %v in %s", entries, tc.dir)
		}
	}
	l, err := Listen(filepath.Join(sticky, "sluice.sock"), SocketOptions{Mode: 0o660, UID: -1, GID: -1})
	if err != nil {
		t.Fatalf("Listen in a sticky 1777 directory: %v", err)
	}
	defer l.Close()
	// The sticky bit keeps another user from removing or renaming it.
	if out, err := asNobody(t, "mv", "-f", filepath.Join(sticky, "sluice.sock"), filepath.Join(sticky, "x")); err == nil {
		t.Fatalf("uid 65534 renamed root's socket in a sticky directory:\n%s", out)
	}
}

// The daemon notices when its socket's name is no longer its socket: a
// removed name is published again, a replaced one is reported, and a
// user who cannot write the directory can do neither.
func TestSocketNameIsVerified(t *testing.T) {
	testutil.RequireRoot(t, "acts as another user")
	dir := trustedTemp(t, 0o755)
	path := filepath.Join(dir, "sluice.sock")
	l, err := Listen(path, SocketOptions{Mode: 0o666, UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, l)
	st, err := os.Lstat(path)
	if err != nil || st.Mode().Perm() != 0o666 || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %v %v, want a 0666 socket", st.Mode(), err)
	}
	if out, err := asNobody(t, "rm", "-f", path); err == nil {
		t.Fatalf("uid 65534 removed the socket:\n%s", out)
	}
	if rep, err := l.Verify(); rep || err != nil {
		t.Fatalf("Verify of an intact socket: %v %v", rep, err)
	}

	os.Remove(path) // root (or a careless cleanup) removes it
	if rep, err := l.Verify(); !rep || err != nil {
		t.Fatalf("Verify after the name was removed: republished %v, %v", rep, err)
	}
	if _, err := NewClient(path).Gateway(); err != nil {
		t.Fatalf("the republished socket does not answer: %v", err)
	}

	os.Remove(path)
	other, err := net.Listen("unix", path) // someone else serves there now
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	os.Lchown(path, 65534, 65534)
	if _, err := l.Verify(); !errors.Is(err, ErrSocketReplaced) || !strings.Contains(err.Error(), "socket of uid 65534") {
		t.Fatalf("Verify of a replaced socket: %v, want ErrSocketReplaced naming uid 65534", err)
	}
	l.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("Close removed a socket that is not ours: %v", err)
	}
}

func serveOn(t *testing.T, l *SocketListener) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Serve(ctx, l, Handler(fakeProvider{policies: 3})); close(done) }()
	t.Cleanup(func() { cancel(); <-done; l.Close() })
}
