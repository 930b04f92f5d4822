package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// PinDirLock is an exclusive flock(2) on a gateway's pin dir: one daemon
// (or `gateway stop`) per pin dir at a time. The kernel drops it when the
// process exits, however it exits.
type PinDirLock struct {
	f   *os.File
	dir string
}

// ErrPinDirBusy means another process holds the pin dir's lock.
var ErrPinDirBusy = errors.New("pin-dir is in use")

// LockPinDir takes the lock of dir (which must exist), failing at once if
// another process holds it; the error names that process.
func LockPinDir(dir string) (*PinDirLock, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("pin-dir %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := lockHolder(f)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: another 'sluice gateway run' (%s) is running on %s; stop it first ('sluice gateway stop --pin-dir %s') or give this one another pin-dir",
				ErrPinDirBusy, holder, dir, dir)
		}
		return nil, fmt.Errorf("locking pin-dir %s: %w", dir, err)
	}
	return &PinDirLock{f: f, dir: dir}, nil
}

// WaitLockPinDir retries LockPinDir until timeout while the dir is busy.
func WaitLockPinDir(dir string, timeout time.Duration) (*PinDirLock, error) {
	deadline := time.Now().Add(timeout)
	for {
		l, err := LockPinDir(dir)
		if err == nil || !errors.Is(err, ErrPinDirBusy) || time.Now().After(deadline) {
			return l, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stale reports whether the locked directory is no longer the one at its
// path (removed, or removed and created again).
func (l *PinDirLock) Stale() bool {
	var held, now unix.Stat_t
	if unix.Fstat(int(l.f.Fd()), &held) != nil || unix.Stat(l.dir, &now) != nil {
		return true
	}
	return held.Dev != now.Dev || held.Ino != now.Ino
}

// Release drops the lock.
func (l *PinDirLock) Release() {
	if l != nil {
		l.f.Close()
	}
}

// lockHolder finds who holds the flock on f in /proc/locks ("pid N"), or
// says it could not tell.
func lockHolder(f *os.File) string {
	st, err := f.Stat()
	if err != nil {
		return "pid unknown"
	}
	sys := st.Sys().(*syscall.Stat_t)
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(sys.Dev), unix.Minor(sys.Dev), sys.Ino)
	locks, err := os.Open("/proc/locks")
	if err != nil {
		return "pid unknown"
	}
	defer locks.Close()
	sc := bufio.NewScanner(locks)
	for sc.Scan() {
		// 1: FLOCK  ADVISORY  WRITE 8100 00:28:622132 0 EOF
		f := strings.Fields(sc.Text())
		if len(f) >= 6 && f[1] == "FLOCK" && f[5] == id {
			if pid, err := strconv.Atoi(f[4]); err == nil && pid > 0 {
				return "pid " + f[4]
			}
		}
	}
	return "pid unknown"
}
