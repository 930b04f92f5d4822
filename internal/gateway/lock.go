// SPDX-License-Identifier: Apache-2.0

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

	"sluice/internal/trust"
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
	f, err := trust.OpenDir(dir, trust.Private)
	if err != nil {
		return nil, fmt.Errorf("pin-dir %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		pid := lockHolder(f)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, busyError(dir, pid)
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

// busyError says who holds dir's lock, by what that process is: a
// gateway, a stop that is detaching, or something else entirely (which
// the message must not call a gateway).
func busyError(dir string, pid int) error {
	switch {
	case pid == 0:
		return fmt.Errorf("%w: a process this one cannot identify holds the lock of %s; if no 'sluice gateway run' is running there, give this one another pin-dir", ErrPinDirBusy, dir)
	case isGatewayCmd(pid, "run"):
		return fmt.Errorf("%w: another 'sluice gateway run' (pid %d) is running on %s; stop it first ('sluice gateway stop --pin-dir %s') or give this one another pin-dir",
			ErrPinDirBusy, pid, dir, dir)
	case isGatewayCmd(pid, "stop"):
		return fmt.Errorf("%w: 'sluice gateway stop' (pid %d) is detaching %s; wait for it to finish", ErrPinDirBusy, pid, dir)
	}
	return fmt.Errorf("%w: pid %d (%s), which is not a sluice gateway, holds the lock of %s; stop it or give this one another pin-dir",
		ErrPinDirBusy, pid, commName(pid), dir)
}

// holderOf returns the pid holding dir's lock, or 0.
func holderOf(dir string) int {
	f, err := os.Open(dir)
	if err != nil {
		return 0
	}
	defer f.Close()
	return lockHolder(f)
}

// lockHolder finds who holds the flock on f in /proc/locks, or 0 when it
// cannot tell.
func lockHolder(f *os.File) int {
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	sys := st.Sys().(*syscall.Stat_t)
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(sys.Dev), unix.Minor(sys.Dev), sys.Ino)
	locks, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer locks.Close()
	sc := bufio.NewScanner(locks)
	for sc.Scan() {
		// 1: FLOCK  ADVISORY  WRITE 8100 00:28:622132 0 EOF
		f := strings.Fields(sc.Text())
		if len(f) >= 6 && f[1] == "FLOCK" && f[5] == id {
			if pid, err := strconv.Atoi(f[4]); err == nil && pid > 0 {
				return pid
			}
		}
	}
	return 0
}
