// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"os"
	"testing"
	"time"

	"sluice/internal/testutil"
)

// A namespace that gets a dead one's inode must not inherit its journal.
// Found in the test VM: an overlay left applied in a deleted namespace
// was torn down "again" in the next namespace with the same inode, which
// failed on a link that never existed there.
func TestJournalNotInheritedByANewNamespace(t *testing.T) {
	testutil.RequireRoot(t, "creates network namespaces")
	dir := t.TempDir()
	// Each namespace that gets an inode not seen before leaves a journal
	// and dies; the first that gets a dead one's inode must not find it.
	// Any inode will do: other tests may take a freed one first.
	dead := map[string]bool{}
	reused := ""
	// The kernel frees a namespace from a work queue: give it time.
	for deadline := time.Now().Add(10 * time.Second); reused == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		testutil.InNewNetns(t, func() {
			ino := nsInode(t)
			j, exists, err := LoadJournal(dir, "b", "b.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if dead[ino] {
				reused = ino
				if exists {
					t.Errorf("a new namespace with the dead one's inode %s found its journal", ino)
				}
				return
			}
			j.addChanged(entry{Kind: "link", Link: "b1"})
			if err := j.save(); err != nil {
				t.Fatal(err)
			}
			dead[ino] = true
		})
	}
	if reused == "" {
		t.Fatalf("no new namespace got a dead one's inode back in 10 s (%d tried): the kernel no longer reuses namespace inodes, rewrite this test", len(dead))
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
