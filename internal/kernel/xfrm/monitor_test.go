// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"sluice/internal/testutil"
)

// nextEvent waits for one event, failing the test after a few seconds.
func nextEvent(t *testing.T, ch <-chan Event) Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("monitor channel closed")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return Event{}
}

func TestMonitorPolicyEvents(t *testing.T) {
	ns, h := testutil.NewNetNS(t)
	w, cancel := watchXFRM(t, h)
	ch := w.Events
	sel := []string{"src", "10.0.0.0/24", "dst", "10.1.0.0/24", "proto", "udp", "dport", "4789", "dir", "out"}
	tmpl := []string{"tmpl", "src", "192.0.2.1", "dst", "192.0.2.2", "proto", "esp", "reqid", "3", "mode", "tunnel"}
	policy := func(verb, prio string) []string {
		return append(append(append([]string{"xfrm", "policy", verb}, sel...), "priority", prio), tmpl...)
	}
	expect := func(kind EventKind, prio uint32) *Policy {
		t.Helper()
		ev := nextEvent(t, ch)
		if ev.Kind != kind || ev.Policy == nil {
			t.Fatalf("got %v %+v, want %v", ev.Kind, ev.Policy, kind)
		}
		p := ev.Policy
		if p.Priority != prio || p.Dir != DirOut || p.Sel.Src != pfx("10.0.0.0/24") || p.Sel.DPort != 4789 ||
			len(p.Tmpls) != 1 || p.Tmpls[0].Reqid != 3 || p.Tmpls[0].Dst != addr("192.0.2.2") {
			t.Fatalf("%v: wrong content %+v", kind, p)
		}
		return p
	}

	testutil.IP(t, ns, policy("add", "10")...)
	added := expect(PolicyNew, 10)
	testutil.IP(t, ns, policy("update", "20")...)
	if upd := expect(PolicyUpd, 20); upd.Index != added.Index {
		t.Fatalf("update changed the index: %#x -> %#x", added.Index, upd.Index)
	}
	// Deleted by selector: the kernel sends the selector as the id and
	// the full policy in XFRMA_POLICY.
	testutil.IP(t, ns, append([]string{"xfrm", "policy", "delete"}, sel...)...)
	if del := expect(PolicyDel, 20); del.Index != added.Index {
		t.Fatalf("delete: index %#x, want %#x", del.Index, added.Index)
	}
	// Deleted by index: the id carries only the index.
	testutil.IP(t, ns, policy("add", "30")...)
	readded := expect(PolicyNew, 30)
	testutil.IP(t, ns, "xfrm", "policy", "delete", "dir", "out", "index", fmt.Sprint(readded.Index))
	if del := expect(PolicyDel, 30); del.Index != readded.Index {
		t.Fatalf("delete by index: index %#x, want %#x", del.Index, readded.Index)
	}
	// The kernel only announces a flush that removed something.
	testutil.IP(t, ns, policy("add", "40")...)
	expect(PolicyNew, 40)
	testutil.IP(t, ns, "xfrm", "policy", "flush")
	if ev := nextEvent(t, ch); ev.Kind != PolicyFlush || ev.Policy == nil || ev.Policy.Sub {
		t.Fatalf("flush: got %v %+v, want main-type flush", ev.Kind, ev.Policy)
	}
	testutil.IP(t, ns, append(policy("add", "50"), "ptype", "sub")...)
	if ev := nextEvent(t, ch); ev.Kind != PolicyNew || !ev.Policy.Sub {
		t.Fatalf("sub add: got %v %+v", ev.Kind, ev.Policy)
	}
	testutil.IP(t, ns, "xfrm", "policy", "flush", "ptype", "sub")
	if ev := nextEvent(t, ch); ev.Kind != PolicyFlush || !ev.Policy.Sub {
		t.Fatalf("flush ptype sub: got %v %+v", ev.Kind, ev.Policy)
	}

	cancel()
	for ev := range ch { // must close, with nothing but stragglers
		t.Fatalf("event after all changes: %v %+v", ev.Kind, ev.Policy)
	}
}

// TestMonitorOverrunResyncs stalls the consumer behind a tiny socket buffer
// while thousands of policies arrive: the kernel overruns the socket, and
// the monitor must say Resync instead of carrying on with a hole.
func TestMonitorOverrunResyncs(t *testing.T) {
	ns, h := testutil.NewNetNS(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	x := HandleAt(h)
	x.RcvBuf = 4096
	w, err := x.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ch := w.Events
	const n = 3000
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf("xfrm policy add src 10.%d.%d.0/24 dst 172.16.0.0/16 dir in", i>>8, i&255)
	}
	testutil.IPBatch(t, ns, lines) // nobody reads ch meanwhile
	news, resync := 0, false
	for !resync {
		switch ev := nextEvent(t, ch); ev.Kind {
		case PolicyNew:
			news++
		case Resync:
			resync = true
			t.Logf("resync after %d events: %v", news, ev.Err)
		default:
			t.Fatalf("unexpected %v: %v", ev.Kind, ev.Err)
		}
	}
	if news >= n {
		t.Fatalf("all %d events arrived, the overrun did not happen", news)
	}
	// The consumer's answer to Resync: dump. Everything is there.
	if ps, err := x.DumpPolicies(); err != nil || len(ps) != n {
		t.Fatalf("dump after resync: %d policies, %v", len(ps), err)
	}
}

func TestMonitorDefaultBufferKeepsUp(t *testing.T) {
	ns, h := testutil.NewNetNS(t)
	w, _ := watchXFRM(t, h)
	ch := w.Events
	const n = 3000
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf("xfrm policy add src 10.%d.%d.0/24 dst 172.16.0.0/16 dir in", i>>8, i&255)
	}
	testutil.IPBatch(t, ns, lines) // same burst, same stalled consumer, 32 MiB buffer
	for i := 0; i < n; i++ {
		if ev := nextEvent(t, ch); ev.Kind != PolicyNew {
			t.Fatalf("event %d: %v (%v), want policy-new", i, ev.Kind, ev.Err)
		}
	}
}

// TestWatchMarkerComesAfterQueuedEvents: a Mark arrives behind every
// notification queued before it, which is what lets the mirror know when a
// dump's stragglers have all been applied.
func TestWatchMarkerComesAfterQueuedEvents(t *testing.T) {
	ns, h := testutil.NewNetNS(t)
	w, _ := watchXFRM(t, h)
	lines := make([]string, 200)
	for i := range lines {
		lines[i] = fmt.Sprintf("xfrm policy add src 10.0.%d.0/24 dst 172.16.0.0/16 dir out", i)
	}
	testutil.IPBatch(t, ns, lines)
	if err := w.Mark(7); err != nil {
		t.Fatal(err)
	}
	for i := range lines {
		if ev := nextEvent(t, w.Events); ev.Kind != PolicyNew {
			t.Fatalf("event %d: %v, want policy-new before the marker", i, ev.Kind)
		}
	}
	if ev := nextEvent(t, w.Events); ev.Kind != Marker || ev.Seq != 7 {
		t.Fatalf("after the queued events: %v seq %d, want marker 7", ev.Kind, ev.Seq)
	}
}

// TestWatchPolicyDefault: `ip xfrm policy setdefault` is announced on the
// policy group; the watch reports all three actions.
func TestWatchPolicyDefault(t *testing.T) {
	ns, h := testutil.NewNetNS(t)
	w, _ := watchXFRM(t, h)
	testutil.IP(t, ns, "xfrm", "policy", "setdefault", "fwd", "block")
	ev := nextEvent(t, w.Events)
	if ev.Kind != PolicyDefault || ev.Default == nil || *ev.Default != (PolicyDefaults{In: ActionAllow, Fwd: ActionBlock, Out: ActionAllow}) {
		t.Fatalf("got %v %+v, want policy-default with fwd block", ev.Kind, ev.Default)
	}
}

// watchXFRM watches the namespace's XFRM notifications until the test ends
// or cancel is called.
func watchXFRM(t *testing.T, h netns.NsHandle) (*Watch, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := HandleAt(h).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return w, cancel
}

// A device going down takes its offloaded SAs and policies with it and the
// kernel sends no XFRM event for that (xfrm_dev_down), so the watch turns
// the link going down into a Resync; a link coming up is no such event.
func TestWatchResyncsWhenALinkGoesDown(t *testing.T) {
	ns, h := testutil.NewNetNS(t)
	testutil.IP(t, ns, "link", "add", "wan0", "type", "veth", "peer", "name", "wan1")
	w, cancel := watchXFRM(t, h)
	defer cancel()
	testutil.IP(t, ns, "link", "set", "wan0", "up")
	testutil.IP(t, ns, "xfrm", "policy", "add", "src", "10.0.0.0/24", "dst", "10.1.0.0/24", "dir", "out")
	if ev := nextEvent(t, w.Events); ev.Kind != PolicyNew {
		t.Fatalf("after a link came up and a policy was added: %v (%v), want policy-new", ev.Kind, ev.Err)
	}
	testutil.IP(t, ns, "link", "set", "wan0", "down")
	ev := nextEvent(t, w.Events)
	if ev.Kind != Resync || ev.Err == nil || !strings.Contains(ev.Err.Error(), "went down") {
		t.Fatalf("after the link went down: %v (%v), want a resync", ev.Kind, ev.Err)
	}
}
