// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

// Seed 000's layout at both ends: each host's SAs and policies are
// packet-offloaded to the active port of its bond. After a failover the
// SAs stay on the old ports, each host sends in cleartext, and Linux 6.12
// accepts cleartext that matches a packet-offloaded IN policy
// (__xfrm_policy_check2 and xfrm_policy.c: the hardware is trusted, so a
// packet without a secpath passes). The traffic flows, in cleartext, with
// no drop and no counter at either end: only the wire (testutil's oracle
// on B's port taps) and sluice (plan refuses the layout, verify fails
// after the failover) say so.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/internal/testutil"
)

func TestOverlayPacketOffloadBondBothEnds(t *testing.T) {
	// The acceptance is the kernel's, whatever the driver: the model's
	// default profile, the one plan's rows read on this kernel.
	testutil.UseNicmodelProfile(t, testutil.ProfileMlx5_612)
	portsBefore := settledNicmodelPorts(t)
	l := newLab(t)
	o := newOVPacketLab(t, l, "bond0")
	ovWrite(t, o.bf, ovPacketHost("b", [2]string{"b0", "b1"}, 2, 1, "0x2001", "0x1001", "bond0"), 0o644)
	step(t, "plan refuses packet offload on a bond without accept-leaks: a silent leak at both ends", func(t *testing.T) {
		strict := filepath.Join(filepath.Dir(o.bf), "b-strict.yaml")
		body, err := os.ReadFile(o.bf)
		if err != nil {
			t.Fatal(err)
		}
		ovWrite(t, strict, strings.Replace(string(body), "      accept-leaks: [cleartext-accepted-on-offloaded-in]\n", "", 1), 0o644)
		out, err := ovSluice(t, o.b, "plan", "-f", strict)
		t.Logf("%s", out)
		if err == nil {
			t.Fatal("plan accepted packet offload on a bond on 6.12 without accept-leaks")
		}
		mustContain(t, out, "accepts cleartext that matches a packet-offloaded IN policy", "a silent leak at both ends",
			"add cleartext-accepted-on-offloaded-in to the peer's accept-leaks")
	})
	step(t, "apply both hosts: each end's SAs on its active port, ESP only on the wire", func(t *testing.T) {
		ovMust(t, o.a, "apply", "-f", o.af)
		ovMust(t, o.b, "apply", "-f", o.bf)
		mustContain(t, run(t, ipPacket(t), "-n", o.b, "xfrm", "state"), "dev b0 dir in mode packet")
		o.encrypts(t, "a0")
	})
	step(t, "both bonds fail over: the pings pass, in cleartext, and neither kernel drops or counts them", func(t *testing.T) {
		// Ports stay up (a port going down flushes its SAs and policies,
		// and with no IN policy cleartext is accepted anyway): the bonds
		// are switched, as after a carrier flap that came back.
		for _, h := range []struct{ ns, port string }{{o.a, "a1"}, {o.b, "b1"}} {
			run(t, "ip", "-n", h.ns, "link", "set", "bond0", "type", "bond", "active_slave", h.port)
			waitActive(t, h.ns, h.port)
		}
		mustContain(t, run(t, ipPacket(t), "-n", o.b, "xfrm", "policy"), "dev b0 mode packet")
		rejBefore := xfrmInRejects(t, o.b)
		w := o.wire(t)
		out, ok := o.ping(t, 3)
		leak := o.wire(t) - w
		t.Logf("ping:\n%s\nwire: %d cleartext IP frames at B's ports", out, leak)
		if !ok {
			t.Fatalf("ping failed: B's kernel dropped the cleartext (a kernel without 0a4524bc6988? update docs/overlay.md and the driverquirk table)")
		}
		if leak < 3 {
			t.Fatalf("%d cleartext frames on the wire for 3 pings, want the pings", leak)
		}
		if n := xfrmInRejects(t, o.b); n != rejBefore {
			t.Fatalf("B's inbound policy rejects rose %d -> %d: the kernel counted the cleartext", rejBefore, n)
		}
	})
	step(t, "sluice announces it: verify fails at both ends, naming the fix", func(t *testing.T) {
		o.verifyFails(t, "packet-offloaded to a0, but bond0's active port is a1", "run sluice apply: it moves them to a1")
		out, err := ovSluice(t, o.b, "verify", "-f", o.bf)
		t.Logf("%s", out)
		if err == nil {
			t.Fatal("verify on B passed with its SAs on the inactive port")
		}
		mustContain(t, out, "packet-offloaded to b0, but bond0's active port is b1")
	})
	step(t, "apply at both ends moves the SAs to the active ports: ESP only again", func(t *testing.T) {
		ovMust(t, o.a, "apply", "-f", o.af)
		ovMust(t, o.b, "apply", "-f", o.bf)
		o.encrypts(t, "a1")
		ovMust(t, o.a, "verify", "-f", o.af)
		ovMust(t, o.b, "verify", "-f", o.bf)
	})
	// Each host's VXLAN device keeps the XFRM bundle it last used on each
	// CPU, and a bundle keeps the policy it was made from: after the move
	// A's old policy on a0 is deleted but alive, and holds a0 (the kernel
	// puts a policy's device only when the policy is freed). A's
	// namespace, alive, still holds its ports, whichever namespace goes
	// first. The model once unregistered both ends of a pair with the
	// first namespace, in that namespace's dismantling, which then waited
	// for a0 forever ("unregister_netdevice: waiting for a0 to become
	// free"), and A's dismantling queued behind it.
	step(t, "B's namespace deleted, then A's: every model port is freed", func(t *testing.T) {
		o.checkWire(t)
		run(t, "ip", "netns", "del", o.b)
		waitNicmodelPorts(t, portsBefore+2)
		for _, p := range []string{"a0", "a1"} {
			mustContain(t, run(t, "ip", "-n", o.a, "link", "show", p), "NO-CARRIER")
		}
		run(t, "ip", "netns", "del", o.a)
		waitNicmodelPorts(t, portsBefore)
	})
}

// settledNicmodelPorts reads the model's count of ports not yet freed
// once it has not moved for 3 s (at most 30 s): the namespaces an earlier
// test deleted are dismantled in the kernel's workqueue after `ip netns
// del` returns, and a port of theirs freed during this test once made
// the count end one below the one read at its start (3, want 4; the
// test before was TestNicmodelProfileSequence).
func settledNicmodelPorts(t *testing.T) int {
	t.Helper()
	n, since, deadline := nicmodelPorts(t), time.Now(), time.Now().Add(30*time.Second)
	for time.Since(since) < 3*time.Second && time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		if m := nicmodelPorts(t); m != n {
			n, since = m, time.Now()
		}
	}
	return n
}

// nicmodelPorts reads the model's count of ports not yet freed.
func nicmodelPorts(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/sys/module/nicmodel/parameters/ports")
	if err != nil {
		t.Fatalf("nicmodel's ports parameter: %v (a model built before it?)", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("nicmodel's ports parameter: %q", b)
	}
	return n
}

// waitNicmodelPorts waits up to 30 s for the model's count of ports not
// yet freed to reach want: a port is freed once its last reference goes.
func waitNicmodelPorts(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for nicmodelPorts(t) != want {
		if time.Now().After(deadline) {
			out, _ := try("sh", "-c", "dmesg | grep -i 'waiting for' | tail -4")
			t.Fatalf("model ports not yet freed: %d, want %d after 30 s\n%s", nicmodelPorts(t), want, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// xfrmInRejects sums ns's counters of inbound packets its policies
// refused (/proc/net/xfrm_stat): cleartext that an IN policy requiring
// ESP meets in software is counted there (XfrmInTmplMismatch).
func xfrmInRejects(t *testing.T, ns string) uint64 {
	t.Helper()
	var n uint64
	for _, l := range strings.Split(nsRun(t, ns, "cat", "/proc/net/xfrm_stat"), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "XfrmInTmplMismatch", "XfrmInNoStates", "XfrmInPolBlock", "XfrmInNoPols", "XfrmInStateMismatch":
			v, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				t.Fatalf("%s's xfrm_stat: %q", ns, l)
			}
			n += v
		}
	}
	return n
}
