// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// NewNetns creates an anonymous network namespace and runs build inside
// it (may be nil). The returned handle keeps the namespace alive: closing
// it destroys the namespace once nothing else uses it.
func NewNetns(build func() error) (netns.NsHandle, error) {
	var ns netns.NsHandle
	err := onLockedThread(func(orig netns.NsHandle) error {
		var err error
		if ns, err = netns.New(); err != nil { // also moves this thread into it
			return fmt.Errorf("creating a network namespace: %w", err)
		}
		if build != nil {
			if err := build(); err != nil {
				ns.Close()
				return err
			}
		}
		return nil
	})
	return ns, err
}

// InNetns runs fn on a thread inside ns, then returns the thread to the
// caller's namespace.
func InNetns(ns netns.NsHandle, fn func() error) error {
	return onLockedThread(func(netns.NsHandle) error {
		if err := netns.Set(ns); err != nil {
			return err
		}
		return fn()
	})
}

// onLockedThread runs fn on a locked OS thread and puts the thread back in
// its original namespace afterwards. If that fails the thread must not run
// other goroutines in the wrong namespace: panic rather than continue.
func onLockedThread(fn func(orig netns.NsHandle) error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	defer func() {
		// A thread fn did not move (netns.New refused, say) stays: setns
		// back into one's own namespace still needs CAP_SYS_ADMIN, and
		// without it that refusal must not become a panic.
		if cur, err := netns.Get(); err == nil {
			same := cur.Equal(orig)
			cur.Close()
			if same {
				return
			}
		}
		if err := netns.Set(orig); err != nil {
			panic(fmt.Sprintf("kernel: cannot restore network namespace: %v", err))
		}
	}()
	return fn(orig)
}
