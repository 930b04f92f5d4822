// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"testing"

	"sluice/internal/kernel/xfrm"
)

// TestCompileIgnoresSocketPolicies: charon installs per-socket bypass
// policies, which the kernel dumps with directions 3 and 4. They never
// apply to forwarded traffic, and must neither crash nor be mirrored.
func TestCompileIgnoresSocketPolicies(t *testing.T) {
	out := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.1.0/24", 100, "123.2.0.1", 1, 7)
	sockIn := xfrm.Policy{Index: 0x1b, Dir: 3, Sel: xfrm.Selector{Src: pfx("0.0.0.0/0"), Dst: pfx("0.0.0.0/0")}}
	sockOut := xfrm.Policy{Index: 0x24, Dir: 4, Sel: xfrm.Selector{Src: pfx("::/0"), Dst: pfx("::/0")}}
	tb, err := Compile(Snapshot{Policies: []xfrm.Policy{sockIn, out, sockOut}})
	if err != nil {
		t.Fatal(err)
	}
	if tb.Mirrored != 1 || len(tb.Entries) != 1 || len(tb.Tuples[1]) != 0 {
		t.Fatalf("mirrored %d policies in %d entries (%d IPv6 shapes), want only the OUT policy", tb.Mirrored, len(tb.Entries), len(tb.Tuples[1]))
	}
}
