// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"sluice/internal/testutil"
)

// inFreshNetns runs f in a new, unnamed network namespace that dies when f
// returns (the kernel then frees its inode for the next one).
func inFreshNetns(t *testing.T, f func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Fatalf("new netns: %v", err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic("cannot return to the test's network namespace: " + err.Error())
		}
		ns.Close()
	}()
	f()
}

// A namespace that gets a dead one's inode must not inherit its journal.
// Found in the test VM: an overlay left applied in a deleted namespace
// was torn down "again" in the next namespace with the same inode, which
// failed on a link that never existed there.
func TestJournalNotInheritedByANewNamespace(t *testing.T) {
	testutil.RequireRoot(t, "creates network namespaces")
	dir := t.TempDir()
	var firstInode string
	inFreshNetns(t, func() {
		firstInode = nsInode(t)
		j, _, err := LoadJournal(dir, "b", "b.yaml")
		if err != nil {
			t.Fatal(err)
		}
		j.addChanged(entry{Kind: "link", Link: "b1"})
		if err := j.save(); err != nil {
			t.Fatal(err)
		}
	})
	// The kernel frees a namespace from a work queue: give it time.
	reused := false
	for i := 0; i < 100 && !reused; i++ {
		time.Sleep(50 * time.Millisecond)
		inFreshNetns(t, func() {
			if nsInode(t) != firstInode {
				return
			}
			reused = true
			if _, exists, err := LoadJournal(dir, "b", "b.yaml"); err != nil || exists {
				t.Errorf("a new namespace with the dead one's inode %s found its journal (exists %v, err %v)", firstInode, exists, err)
			}
		})
	}
	if !reused {
		t.Fatalf("no new namespace got inode %s back in 5 s: the kernel no longer reuses namespace inodes at once, rewrite this test", firstInode)
	}
}

func nsInode(t *testing.T) string {
	t.Helper()
	l, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return l
}
