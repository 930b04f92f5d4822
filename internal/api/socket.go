// SPDX-License-Identifier: Apache-2.0

package api

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"sluice/internal/trust"
)

// SocketOptions set who may talk to the daemon.
type SocketOptions struct {
	Mode os.FileMode // default 0660
	UID  int         // -1: leave as is
	GID  int         // -1: leave as is
}

// ErrSocketInUse means another daemon answers on the socket.
var ErrSocketInUse = errors.New("another sluice daemon is serving on this socket")

// umaskMu serialises the process-wide umask around bind(2).
var umaskMu sync.Mutex

// Listen creates the daemon's unix socket at path without a window in
// which it exists with the wrong owner or mode, or in which a check and a
// use could race:
//   - the directory must be one only root or we can change (trust.Shared:
//     not group/other-writable without the sticky bit, owned by root or
//     us, and so its parents), and every step acts on a descriptor of it
//     opened with O_NOFOLLOW, never on its path;
//   - the socket is bound in a fresh private directory with its final
//     mode (the umask), given its owner there (fchownat, no symlinks),
//     then published with linkat(2), which fails if the name exists.
//
// An existing name is only replaced when it is a stale socket (nobody
// answers) owned by us. Verify tells whether the name still is ours.
func Listen(path string, o SocketOptions) (*SocketListener, error) {
	if o.Mode == 0 {
		o.Mode = 0o660
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := trust.CheckDir(dir, trust.Shared); err != nil {
		return nil, err
	}
	d, err := trust.OpenDir(dir, trust.Shared)
	if err != nil {
		return nil, err
	}
	s := &SocketListener{path: path, base: filepath.Base(path), dir: d, opts: o,
		conns: make(chan acceptResult), done: make(chan struct{})}
	if err := s.publish(); err != nil {
		d.Close()
		return nil, err
	}
	return s, nil
}

// SocketListener is the API's listener: it accepts on the socket it
// published, and publishes a new one when Verify finds the name removed.
type SocketListener struct {
	path, base string
	dir        *os.File // the socket's directory, opened O_NOFOLLOW
	opts       SocketOptions
	conns      chan acceptResult
	done       chan struct{}

	mu     sync.Mutex // guards the fields below
	cur    *net.UnixListener
	ino    uint64
	closed bool
}

type acceptResult struct {
	c   net.Conn
	err error
}

// publish binds a new socket and links it at the path.
func (s *SocketListener) publish() error {
	dfd := int(s.dir.Fd())
	var rnd [6]byte
	rand.Read(rnd[:])
	priv := ".sluice-sock-" + hex.EncodeToString(rnd[:])
	if err := unix.Mkdirat(dfd, priv, 0o700); err != nil {
		return fmt.Errorf("creating a private directory in %s: %w", filepath.Dir(s.path), err)
	}
	defer unix.Unlinkat(dfd, priv, unix.AT_REMOVEDIR)
	pfd, err := unix.Openat(dfd, priv, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	defer unix.Unlinkat(pfd, "s", 0)
	// bind(2) takes a path: the descriptor's /proc name is the private
	// directory itself, wherever its name has gone meanwhile.
	umaskMu.Lock()
	old := unix.Umask(int(0o777 &^ s.opts.Mode.Perm()))
	l, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/s", pfd))
	unix.Umask(old)
	umaskMu.Unlock()
	if err != nil {
		return err
	}
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	if s.opts.UID >= 0 || s.opts.GID >= 0 {
		if err := unix.Fchownat(pfd, "s", s.opts.UID, s.opts.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			ul.Close()
			return fmt.Errorf("setting the owner of %s: %w", s.path, err)
		}
	}
	for attempt := 0; ; attempt++ {
		err := unix.Linkat(pfd, "s", dfd, s.base, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EEXIST) || attempt > 0 {
			ul.Close()
			return fmt.Errorf("publishing %s: %w", s.path, err)
		}
		if err := s.removeStale(); err != nil {
			ul.Close()
			return err
		}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, s.base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		ul.Close()
		return err
	}
	s.mu.Lock()
	prev := s.cur
	s.cur, s.ino = ul, st.Ino
	s.mu.Unlock()
	if prev != nil {
		prev.Close() // its name is gone: nobody can reach it any more
	}
	go s.acceptFrom(ul)
	return nil
}

// removeStale removes the name only if it is a socket we own that nobody
// serves.
func (s *SocketListener) removeStale() error {
	var st unix.Stat_t
	err := unix.Fstatat(int(s.dir.Fd()), s.base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("%s exists and is not a socket: remove it or choose another api-socket", s.path)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not to us: refusing to replace it", s.path, st.Uid)
	}
	if c, err := net.DialTimeout("unix", s.path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s: %w (stop it first: sluice gateway stop)", s.path, ErrSocketInUse)
	}
	return unix.Unlinkat(int(s.dir.Fd()), s.base, 0)
}

func (s *SocketListener) acceptFrom(l *net.UnixListener) {
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			replaced := s.cur != l
			s.mu.Unlock()
			if replaced {
				return // republished: the new listener accepts now
			}
		}
		select {
		case s.conns <- acceptResult{c, err}:
		case <-s.done:
			if c != nil {
				c.Close()
			}
			return
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// Accept implements net.Listener.
func (s *SocketListener) Accept() (net.Conn, error) {
	select {
	case r := <-s.conns:
		return r.c, r.err
	case <-s.done:
		return nil, net.ErrClosed
	}
}

// Addr implements net.Listener.
func (s *SocketListener) Addr() net.Addr { return &net.UnixAddr{Name: s.path, Net: "unix"} }

// ErrSocketReplaced means the published name is now another file: clients
// that connect there do not reach this daemon.
var ErrSocketReplaced = errors.New("no longer this daemon's socket")

// Verify checks that the published name is still this daemon's socket. A
// name that was removed is published again (republished is true); a name
// that now is another file is left alone and reported with
// ErrSocketReplaced, since clients reach whoever made it.
func (s *SocketListener) Verify() (republished bool, err error) {
	s.mu.Lock()
	ino, closed := s.ino, s.closed
	s.mu.Unlock()
	if closed {
		return false, nil
	}
	var st unix.Stat_t
	err = unix.Fstatat(int(s.dir.Fd()), s.base, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		if err := s.publish(); err != nil {
			return false, fmt.Errorf("%s was removed; publishing it again: %w", s.path, err)
		}
		return true, nil
	case err != nil:
		return false, err
	case st.Ino != ino:
		return false, fmt.Errorf("%s is %w (now a %s of uid %d): clients that connect there do not reach this daemon; remove it and the daemon publishes its own again",
			s.path, ErrSocketReplaced, fileType(st.Mode), st.Uid)
	}
	var now unix.Stat_t
	var held unix.Stat_t
	if unix.Stat(filepath.Dir(s.path), &now) == nil && unix.Fstat(int(s.dir.Fd()), &held) == nil && (now.Ino != held.Ino || now.Dev != held.Dev) {
		return false, fmt.Errorf("the directory of %s was replaced: %w; restart the daemon", s.path, ErrSocketReplaced)
	}
	return false, nil
}

func fileType(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "directory"
	}
	return "file"
}

// Close stops accepting and removes the name, unless it is no longer ours.
func (s *SocketListener) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	cur, ino := s.cur, s.ino
	s.mu.Unlock()
	close(s.done)
	var st unix.Stat_t
	if unix.Fstatat(int(s.dir.Fd()), s.base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Ino == ino {
		unix.Unlinkat(int(s.dir.Fd()), s.base, 0)
	}
	err := cur.Close()
	s.dir.Close()
	return err
}
