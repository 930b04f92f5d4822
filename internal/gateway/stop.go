// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"sluice/internal/fastpath"
	"sluice/internal/flower"
	"sluice/internal/kernel/tcflower"
)

// stopWait is how long stop waits for the daemon to exit after SIGTERM.
const stopWait = 10 * time.Second

// Stop is 'sluice gateway stop': it signals the daemon of pinDir (if its
// pid file names a 'gateway run'), waits for it to release the pin dir,
// removes sluice's flower rules and detaches the fast path from every
// interface pinned under pinDir. It reports what it did to out and
// problems it works around to errOut.
func Stop(pinDir string, out, errOut io.Writer) error {
	signalled := 0
	if pid := daemonOf(pinDir); pid != 0 {
		if p, err := os.FindProcess(pid); err == nil && p.Signal(syscall.SIGTERM) == nil {
			fmt.Fprintf(out, "signalled daemon (pid %d)\n", pid)
			signalled = pid
		}
	}
	// Detach only once the daemon is gone (its lock is free):
	// a daemon still running would pin again what stop removes.
	if _, err := os.Stat(pinDir); err == nil {
		lock, err := WaitLockPinDir(pinDir, stopWait)
		switch {
		case errors.Is(err, os.ErrNotExist):
			// Another 'gateway stop' detached and removed the pin dir
			// while this one waited: nothing is left to do here.
		case err != nil:
			return stopBusy(pinDir, err, signalled)
		default:
			defer lock.Release()
		}
	}
	// Hardware rules outlive the daemon: remove sluice's flower
	// filters whether or not it is still running (a killed one
	// could not). Run this from the unit's ExecStopPost.
	if n, err := removeFlowerRules(); err != nil {
		fmt.Fprintf(errOut, "removing flower rules: %v\n", err)
	} else if n > 0 {
		fmt.Fprintf(out, "removed %d flower rule(s)\n", n)
	}
	detached, err := fastpath.Detach(pinDir)
	for _, d := range detached {
		fmt.Fprintf(out, "detached from %s\n", d)
	}
	if len(detached) == 0 && err == nil {
		fmt.Fprintf(out, "nothing attached (no pins under %s)\n", pinDir)
	}
	return err
}

func removeFlowerRules() (int, error) {
	fs, err := tcflower.Open()
	if err != nil {
		return 0, err
	}
	defer fs.Close()
	return flower.RemoveAll(fs)
}

// daemonOf finds the daemon of pinDir: the pid its pid file names, or,
// when there is no pid file (it could not be written), the 'gateway run'
// holding the pin dir's lock.
func daemonOf(pinDir string) int {
	if pid, ok := readPIDFile(PIDFile(pinDir)); ok && isGatewayRun(pid) {
		return pid
	}
	if pid := holderOf(pinDir); pid != 0 && isGatewayRun(pid) {
		return pid
	}
	return 0
}

// stopBusy explains why the pin dir stayed locked for stopWait: the
// daemon stop signalled did not exit, or another stop still detaches.
func stopBusy(pinDir string, err error, signalled int) error {
	holder := holderOf(pinDir)
	switch {
	case holder != 0 && isGatewayCmd(holder, "stop"):
		return fmt.Errorf("%w; this stop detached nothing", err)
	case holder != 0 && holder == signalled:
		return fmt.Errorf("%w (it did not exit within %s of SIGTERM; nothing was detached)", err, stopWait)
	}
	return fmt.Errorf("%w (nothing was detached)", err)
}
