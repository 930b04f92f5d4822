// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"sluice/internal/kernel/xfrm"

	"sluice/internal/testutil"
)

// mirrorEnv runs a Mirror against the XFRM database of a fresh namespace.
type mirrorEnv struct {
	t      *testing.T
	name   string
	mirror *Mirror
	dp     *Datapath
}

func newMirrorEnv(t *testing.T) *mirrorEnv { return newMirrorEnvBuf(t, 0) }

// newMirrorEnvBuf gives the monitor socket rcvbuf bytes (0: the default).
func newMirrorEnvBuf(t *testing.T, rcvbuf int) *mirrorEnv {
	testutil.RequireRoot(t, "loads BPF programs and creates network namespaces")
	name, ns := testutil.NewNetNS(t)
	dp, err := Load(LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	// BPF_PROG_RUN without a context arrives on loopback (ifindex 1).
	if err := dp.SetIfaces([]Iface{{Ifindex: 1}}); err != nil {
		t.Fatal(err)
	}
	x := xfrm.HandleAt(ns)
	x.RcvBuf = rcvbuf
	m := &Mirror{DP: dp, Src: KernelSource{X: x}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("mirror: %v", err)
		}
	})
	return &mirrorEnv{t: t, name: name, mirror: m, dp: dp}
}

func (e *mirrorEnv) ip(args ...string) { ip(e.t, append([]string{"-n", e.name}, args...)...) }

// waitFor polls the mirror's status (events are applied after a debounce).
func (e *mirrorEnv) waitFor(what string, ok func(MirrorStatus) bool) MirrorStatus {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := e.mirror.Status()
		if s.InSync && ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s; status %+v", what, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *mirrorEnv) decide(src, dst string) *Decision {
	e.t.Helper()
	frame, err := udp(src, dst, 64).Marshal()
	if err != nil {
		e.t.Fatal(err)
	}
	d, err := e.dp.Explain(frame, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

func TestMirrorFollowsKernelPolicies(t *testing.T) {
	e := newMirrorEnv(t)
	e.waitFor("empty initial sync", func(s MirrorStatus) bool { return s.KernelPolicies == 0 })
	if d := e.decide("10.0.0.1", "48.0.0.1"); d.Reason != ReasonNoPolicy {
		t.Fatalf("empty: %s", d.ReasonName)
	}

	e.ip("xfrm", "policy", "add", "src", "10.0.0.0/8", "dst", "48.0.0.0/16", "dir", "out", "priority", "200",
		"tmpl", "src", "123.0.0.1", "dst", "123.2.0.1", "proto", "esp", "mode", "tunnel", "reqid", "1")
	e.waitFor("policy add", func(s MirrorStatus) bool { return s.MirroredPolicies == 1 })
	d := e.decide("10.0.0.1", "48.0.0.1")
	if d.Reason != ReasonNotOffloaded || d.PolicyPriority != 200 {
		t.Fatalf("after add: %s prio %d, want not-offloaded by the prio-200 policy", d.ReasonName, d.PolicyPriority)
	}

	e.ip("xfrm", "policy", "update", "src", "10.0.0.0/8", "dst", "48.0.0.0/16", "dir", "out", "priority", "300", "action", "block")
	e.waitFor("policy update", func(MirrorStatus) bool {
		d := e.decide("10.0.0.1", "48.0.0.1")
		return d.Reason == ReasonBlock
	})

	e.ip("xfrm", "policy", "delete", "src", "10.0.0.0/8", "dst", "48.0.0.0/16", "dir", "out")
	e.waitFor("policy delete", func(s MirrorStatus) bool { return s.MirroredPolicies == 0 })
	if d := e.decide("10.0.0.1", "48.0.0.1"); d.Reason != ReasonNoPolicy {
		t.Fatalf("after delete: %s", d.ReasonName)
	}

	// 65,536 policies, as strongSwan would install for 65k tunnels.
	const n = 65536
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "xfrm policy add src 16.0.0.0/8 dst 48.%d.%d.0/24 dir out priority %d tmpl src 123.0.0.1 dst 123.2.%d.%d proto esp mode tunnel reqid %d\n",
			i/256, i%256, 1000+i%7, i/256, i%256, i+1)
	}
	batch := filepath.Join(t.TempDir(), "policies.batch")
	if err := os.WriteFile(batch, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.ip("-batch", batch)
	s := e.waitFor("65,536 policies", func(s MirrorStatus) bool { return s.MirroredPolicies == n })
	t.Logf("65,536 policies installed and mirrored in %v (last sync took %s, %d syncs, %d resyncs)",
		time.Since(start), s.LastSyncDuration, s.Syncs, s.Resyncs)
	if d := e.decide("16.1.2.3", "48.255.255.9"); d.Reason != ReasonNotOffloaded || d.PolicyPriority != 1000+65535%7 {
		t.Fatalf("last of 65,536: %s prio %d", d.ReasonName, d.PolicyPriority)
	}

	e.ip("xfrm", "policy", "flush")
	e.waitFor("flush", func(s MirrorStatus) bool { return s.MirroredPolicies == 0 })
	if d := e.decide("16.1.2.3", "48.255.255.9"); d.Reason != ReasonNoPolicy {
		t.Fatalf("after flush: %s", d.ReasonName)
	}
}

// TestMirrorPrunesCountersOfDeletedPolicies: counters of policies the
// kernel no longer has are dropped at the next sync.
func TestMirrorPrunesCountersOfDeletedPolicies(t *testing.T) {
	e := newMirrorEnv(t)
	e.waitFor("empty initial sync", func(s MirrorStatus) bool { return s.KernelPolicies == 0 })
	if err := e.dp.SetCounters(true); err != nil {
		t.Fatal(err)
	}
	e.ip("xfrm", "policy", "add", "src", "10.0.0.0/8", "dst", "48.0.0.0/16", "dir", "out",
		"tmpl", "src", "123.0.0.1", "dst", "123.2.0.1", "proto", "esp", "mode", "tunnel")
	e.waitFor("policy add", func(s MirrorStatus) bool { return s.MirroredPolicies == 1 })
	frame, _ := udp("10.0.0.1", "48.0.0.1", 64).Marshal()
	if _, err := e.dp.objs.XdpFastpath.Run(&ebpf.RunOptions{Data: frame}); err != nil {
		t.Fatal(err)
	}
	if pcs, _ := e.dp.PolicyCounts(); len(pcs) != 1 {
		t.Fatalf("counters before delete: %+v, want one policy", pcs)
	}
	e.ip("xfrm", "policy", "flush")
	e.waitFor("flush", func(s MirrorStatus) bool { return s.MirroredPolicies == 0 })
	if pcs, _ := e.dp.PolicyCounts(); len(pcs) != 0 {
		t.Fatalf("counters of a deleted policy survived the sync: %+v", pcs)
	}
}

// TestMirrorFollowsPolicyDefault: `ip xfrm policy setdefault fwd block` at
// runtime reaches the program (which then leaves every forward to the
// kernel's FWD check), and `fwd accept` takes it back.
func TestMirrorFollowsPolicyDefault(t *testing.T) {
	e := newMirrorEnv(t)
	e.waitFor("initial sync", func(MirrorStatus) bool { return true })
	fwdBlock := func() bool {
		cfg, err := e.dp.config()
		if err != nil {
			t.Fatal(err)
		}
		return cfg.FwdDefaultBlock != 0
	}
	if fwdBlock() {
		t.Fatal("a fresh namespace's FWD default is accept")
	}
	for _, c := range []struct {
		action string
		block  bool
	}{{"block", true}, {"accept", false}} {
		syncs := e.mirror.Status().Syncs
		e.ip("xfrm", "policy", "setdefault", "fwd", c.action)
		e.waitFor("setdefault fwd "+c.action, func(s MirrorStatus) bool { return s.Syncs > syncs })
		if fwdBlock() != c.block {
			t.Fatalf("after setdefault fwd %s the program's FWD default block=%v", c.action, !c.block)
		}
	}
}
