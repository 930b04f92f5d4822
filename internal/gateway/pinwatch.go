// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// pinCheckEvery is how often the daemon checks that its pins are there.
const pinCheckEvery = time.Second

// pinStatus is what status and metrics say about the pins.
type pinStatus struct {
	mu        sync.Mutex
	OK        bool
	Missing   []string
	Repairs   uint64
	LastError string
}

// recovered marks the pins OK again after a failure, reporting whether
// they were not.
func (p *pinStatus) recovered() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.OK {
		return false
	}
	p.OK, p.Missing, p.LastError = true, nil, ""
	return true
}

func (p *pinStatus) get() pinStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return pinStatus{OK: p.OK, Missing: p.Missing, Repairs: p.Repairs, LastError: p.LastError}
}

// watchPins checks the pin dir every pinCheckEvery. Pins removed under the
// daemon (rm -r of the pin dir, a careless cleanup) do not detach the
// program, since the daemon holds the links open, but they would hide it
// from `gateway stop|explain` and from the next daemon, and would detach
// it at exit. So: log, report, take the lock of a re-created directory, and
// pin again. It returns an error only when another daemon took the pin dir
// meanwhile; the caller then closes the fast path and exits.
func (rt *gatewayRuntime) watchPins(ctx context.Context, lock *atomic.Pointer[PinDirLock], log *slog.Logger) error {
	dir := rt.opts.PinDir
	tick := time.NewTicker(pinCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		missing := rt.dp.MissingPins(dir)
		if len(missing) == 0 && !lock.Load().Stale() {
			// Pins hidden for a while (a mount over the pin dir) are
			// visible again: say so, or an alert on pins.ok never clears.
			if rt.pins.recovered() {
				log.Info("pins visible again", "pin-dir", dir)
			}
			continue
		}
		log.Error("pins removed under the running daemon; the program stays attached (the daemon holds it), pinning again", "pin-dir", dir, "missing", strings.Join(missing, ","))
		err := rt.repairPins(lock)
		rt.pins.mu.Lock()
		rt.pins.OK, rt.pins.Missing = err == nil, missing
		if err != nil {
			rt.pins.LastError = err.Error()
		} else {
			rt.pins.Repairs++
			rt.pins.LastError = ""
		}
		rt.pins.mu.Unlock()
		switch {
		case err == nil:
			log.Info("pins restored", "pin-dir", dir)
		case isBusy(err):
			return err
		default:
			log.Error("pinning again failed; retrying", "err", err)
		}
	}
}

func (rt *gatewayRuntime) repairPins(lock *atomic.Pointer[PinDirLock]) error {
	dir := rt.opts.PinDir
	if lock.Load().Stale() {
		if _, err := preparePinDir(dir); err != nil {
			return err
		}
		l, err := LockPinDir(dir)
		if err != nil {
			return err
		}
		lock.Swap(l).Release()
	}
	return rt.dp.RepairPins(dir)
}

func isBusy(err error) bool { return errors.Is(err, ErrPinDirBusy) }
