// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netns"

	"golang.org/x/sys/unix"
	"sluice/internal/fileread"
)

var netnsSeq atomic.Int32

// netnsRunDir is where iproute2 (and so every operator's `ip -n NAME`)
// looks for named namespaces.
const netnsRunDir = "/run/netns"

// NewNetNS creates a fresh network namespace for one test and removes it
// when the test ends. It is named (bind-mounted under /run/netns) so that
// the test can drive it with `ip -n NAME`, exactly as an operator would;
// the name is unique to this process (sluice-t<pid>-<n>), so parallel test
// binaries never collide. Its lo is down, as in any new namespace. Skips
// unless root.
func NewNetNS(tb testing.TB) (string, netns.NsHandle) {
	tb.Helper()
	RequireRoot(tb, "creates network namespaces")
	if err := prepareNetnsRunDir(); err != nil {
		tb.Fatalf("prepare %s as ip netns does: %v", netnsRunDir, err)
	}
	name := fmt.Sprintf("sluice-t%d-%d", os.Getpid(), netnsSeq.Add(1))
	ns, err := created(tb, func() (netns.NsHandle, error) { return netns.NewNamed(name) })
	if err != nil {
		tb.Fatalf("new netns %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			tb.Errorf("delete netns %s: %v%s", name, err, mountsHolding(netnsRunDir+"/"+name))
		}
	})
	return name, ns
}

var runDirOnce struct {
	sync.Mutex
	done bool
}

// prepareNetnsRunDir makes /run/netns what `ip netns add` makes it before
// its first namespace: a mount point of its own, shared, so that a
// namespace bind-mounted into it propagates to every mount namespace that
// shares it. vishvananda/netns NewNamed only mkdirs the directory. On a new
// boot, namespaces mounted into the plain directory are later shadowed when
// the first `ip netns add` bind-mounts /run/netns onto itself; deleting one
// then unmounts the copy and its remove fails with EBUSY (issue 36). Same
// steps as iproute2's netns_add: try MS_SHARED, and on EINVAL (not a mount
// point) bind the directory onto itself first.
func prepareNetnsRunDir() error {
	runDirOnce.Lock()
	defer runDirOnce.Unlock()
	if runDirOnce.done {
		return nil
	}
	if err := os.MkdirAll(netnsRunDir, 0o755); err != nil {
		return err
	}
	for bound := false; ; bound = true {
		err := unix.Mount("", netnsRunDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EINVAL) || bound {
			return fmt.Errorf("make %s a shared mount: %w", netnsRunDir, err)
		}
		if err := unix.Mount(netnsRunDir, netnsRunDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s onto itself: %w", netnsRunDir, err)
		}
	}
	runDirOnce.done = true
	return nil
}

// mountsHolding lists the lines of /proc/self/mountinfo whose mount point
// is path, so that a namespace that cannot be removed says which mount
// still holds it (and its parent, which tells a shadowed mount).
func mountsHolding(path string) string {
	b, err := fileread.ReadKernel("/proc/self/mountinfo", 16<<20)
	if err != nil {
		return fmt.Sprintf(" (cannot read /proc/self/mountinfo: %v)", err)
	}
	var held []string
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 && fields[4] == path {
			held = append(held, line)
		}
	}
	if len(held) == 0 {
		return " (no mount at that path in /proc/self/mountinfo)"
	}
	return "; still mounted there (/proc/self/mountinfo):\n\t" + strings.Join(held, "\n\t")
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

// DeleteIPNetNS deletes a namespace a test made with `ip netns add`, and
// fails the test, naming the mounts that still hold it, when it cannot:
// a namespace left behind collides with the next run (issue 36).
func DeleteIPNetNS(tb testing.TB, name string) {
	tb.Helper()
	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		tb.Errorf("ip netns del %s: %v: %s%s", name, err, strings.TrimSpace(string(out)), mountsHolding(netnsRunDir+"/"+name))
	}
}
