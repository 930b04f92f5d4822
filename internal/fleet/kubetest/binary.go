// SPDX-License-Identifier: Apache-2.0

package kubetest

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// buildLock is the file scripts/kube-apiserver.sh holds an exclusive lock
// on while it builds the binary. make setup starts that build first and
// does not wait for it, so that apt, lint and the host tests that need no
// API server run beside it (issue 36: it was 6 of a fresh machine's
// minutes with nothing else running).
func buildLock() string { return filepath.Join(filepath.Dir(APIServerBinary()), "kube-apiserver.lock") }

// buildLog is where make setup sends the background build's output.
func buildLog() string { return filepath.Join(filepath.Dir(APIServerBinary()), "kube-apiserver.log") }

// buildWait bounds the wait for a build in progress: a fresh 2-core
// machine took about 5 minutes with nothing else running.
const buildWait = 20 * time.Minute

// awaitBinary returns nil once the API server binary exists, waiting for a
// build that is still running; otherwise it says why there is none.
func awaitBinary() error {
	if _, err := os.Stat(APIServerBinary()); err == nil {
		return nil
	}
	f, err := os.Open(buildLock())
	if err != nil {
		return fmt.Errorf("%s missing and no build started: run make setup (scripts/kube-apiserver.sh builds it once, ~5 min)", APIServerBinary())
	}
	defer f.Close()
	locked := make(chan error, 1)
	go func() { locked <- unix.Flock(int(f.Fd()), unix.LOCK_SH) }()
	select {
	case err := <-locked:
		if err != nil {
			return fmt.Errorf("wait for the kube-apiserver build (%s): %w", buildLock(), err)
		}
	case <-time.After(buildWait):
		return fmt.Errorf("the kube-apiserver build still runs after %v: see %s", buildWait, buildLog())
	}
	if _, err := os.Stat(APIServerBinary()); err != nil {
		return fmt.Errorf("the kube-apiserver build ended without %s: see %s", APIServerBinary(), buildLog())
	}
	return nil
}
