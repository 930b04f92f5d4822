// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netns"
)

var netnsSeq atomic.Int32

// NewNetNS creates a fresh network namespace for one test and removes it
// when the test ends. It is named (bind-mounted under /run/netns) so that
// the test can drive it with `ip -n NAME`, exactly as an operator would;
// the name is unique to this process (sluice-t<pid>-<n>), so parallel test
// binaries never collide. Its lo is down, as in any new namespace. Skips
// unless root.
func NewNetNS(tb testing.TB) (string, netns.NsHandle) {
	tb.Helper()
	RequireRoot(tb, "creates network namespaces")
	name := fmt.Sprintf("sluice-t%d-%d", os.Getpid(), netnsSeq.Add(1))
	ns, err := created(tb, func() (netns.NsHandle, error) { return netns.NewNamed(name) })
	if err != nil {
		tb.Fatalf("new netns %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			tb.Errorf("delete netns %s: %v", name, err)
		}
	})
	return name, ns
}

// created runs create, which moves the calling thread into the namespace
// it makes (netns.New, netns.NewNamed), on a locked thread that it moves
// back before anything else runs on it.
func created(tb testing.TB, create func() (netns.NsHandle, error)) (netns.NsHandle, error) {
	tb.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		tb.Fatal(err)
	}
	defer orig.Close()
	ns, err := create()
	if serr := netns.Set(orig); serr != nil {
		panic(fmt.Sprintf("cannot return to the test's network namespace: %v", serr))
	}
	return ns, err
}
