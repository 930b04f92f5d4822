// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"testing"
	"time"

	"sluice/internal/kernel/xfrm"
)

// TestMirrorFollowsMigratedPolicy: XFRM_MSG_MIGRATE moves a policy's
// template to a new peer and tells only the MIGRATE group. The mirror must
// not keep the old peer: it resyncs, and its copy holds the new one.
func TestMirrorFollowsMigratedPolicy(t *testing.T) {
	e := newMirrorEnv(t)
	e.ip("xfrm", "policy", "add", "src", "10.0.0.0/8", "dst", "48.0.0.0/16", "dir", "out",
		"tmpl", "src", "123.0.0.1", "dst", "123.2.0.1", "proto", "esp", "mode", "tunnel", "reqid", "1")
	s := e.waitFor("policy add", func(s MirrorStatus) bool { return s.MirroredPolicies == 1 })
	ps, err := e.mirror.Src.Dump()
	if err != nil || len(ps.Policies) != 1 {
		t.Fatalf("dump: %+v, %v", ps.Policies, err)
	}
	idx := ps.Policies[0].Index
	moved := addr("123.9.0.1")
	x := e.mirror.Src.(KernelSource).X
	err = x.Migrate(xfrm.DirOut, pfx("10.0.0.0/8"), pfx("48.0.0.0/16"), []xfrm.Migration{{
		OldSrc: addr("123.0.0.1"), OldDst: addr("123.2.0.1"), NewSrc: addr("123.0.0.1"), NewDst: moved,
		Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, Reqid: 1,
	}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, ok := e.mirror.Policy(idx)
		now := e.mirror.Status()
		if ok && len(p.Tmpls) == 1 && p.Tmpls[0].Dst == moved && now.InSync && now.Resyncs > s.Resyncs {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the migration the mirror holds %+v (resyncs %d, before %d): stale", p.Tmpls, now.Resyncs, s.Resyncs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
