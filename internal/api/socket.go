package api

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// SocketOptions set who may talk to the daemon.
type SocketOptions struct {
	Mode os.FileMode // default 0660
	UID  int         // -1: leave as is
	GID  int         // -1: leave as is
}

// ErrSocketInUse means another daemon answers on the socket.
var ErrSocketInUse = errors.New("another sluice daemon is serving on this socket")

// Listen creates the daemon's unix socket at path without a window in
// which it exists with the wrong owner or mode, or in which a check and a
// bind could race: it binds in a private directory, sets mode and owner
// there, then publishes the name with link(2), which fails if the name
// exists. An existing name is only replaced when it is a stale socket
// (nobody answers) owned by us.
func Listen(path string, o SocketOptions) (net.Listener, error) {
	if o.Mode == 0 {
		o.Mode = 0o660
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	tmpDir, err := os.MkdirTemp(dir, ".sluice-sock-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "s")
	l, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, err
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, o.Mode); err != nil {
		l.Close()
		return nil, err
	}
	if o.UID >= 0 || o.GID >= 0 {
		if err := os.Lchown(tmp, o.UID, o.GID); err != nil {
			l.Close()
			return nil, fmt.Errorf("setting the owner of %s: %w", path, err)
		}
	}
	for attempt := 0; ; attempt++ {
		err := os.Link(tmp, path)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) || attempt > 0 {
			l.Close()
			return nil, fmt.Errorf("publishing %s: %w", path, err)
		}
		if err := removeStale(path); err != nil {
			l.Close()
			return nil, err
		}
	}
	st, err := os.Lstat(path)
	if err != nil {
		l.Close()
		return nil, err
	}
	return &socketListener{Listener: l, path: path, ino: st.Sys().(*syscall.Stat_t).Ino}, nil
}

// removeStale removes path only if it is a socket we own that nobody
// serves.
func removeStale(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket: remove it or choose another api-socket", path)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not to us: refusing to replace it", path, uid)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s: %w (stop it first: sluice gateway stop)", path, ErrSocketInUse)
	}
	return os.Remove(path)
}

// socketListener removes its name on Close, unless another daemon has
// replaced it since.
type socketListener struct {
	net.Listener
	path string
	ino  uint64
}

func (s *socketListener) Close() error {
	if st, err := os.Lstat(s.path); err == nil && st.Sys().(*syscall.Stat_t).Ino == s.ino {
		os.Remove(s.path)
	}
	return s.Listener.Close()
}
