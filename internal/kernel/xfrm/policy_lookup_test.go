// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"sluice/internal/testutil"
)

// A notification never carries the security context (xfrm_notify_policy
// skips copy_to_user_sec_ctx); the GETPOLICY answer does. The event must
// come out labelled, and a lookup that cannot say must never come out
// certain. The host kernel has no LSM with xfrm hooks, so the labelled
// answer is built here.
func TestWatchPolicyEventTakesContextFromLookup(t *testing.T) {
	p := Policy{Index: 0x41, Dir: DirFwd, Priority: 7,
		Sel:   Selector{Src: netip.MustParsePrefix("10.0.0.0/24"), Dst: netip.MustParsePrefix("10.1.0.0/24")},
		Tmpls: []Tmpl{{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"), Proto: ProtoESP, Mode: ModeTunnel, Reqid: 1}}}
	notified := wirePolicy(&p) // as xfrm_notify_policy sends it: no XFRMA_SEC_CTX
	labelled := p
	labelled.SecCtx = true
	answer, err := parsePolicyMsg(wirePolicy(&labelled)) // as dump_one_policy sends it
	if err != nil || !answer.SecCtx {
		t.Fatalf("building the labelled answer: %v %+v", err, answer)
	}
	for _, kind := range []uint16{nl.XFRM_MSG_NEWPOLICY, nl.XFRM_MSG_UPDPOLICY} {
		ev, ok, err := decodeXFRMEvent(kind, notified)
		if !ok || err != nil || ev.Policy.SecCtx {
			t.Fatalf("decoding the notification: ok=%v err=%v %+v", ok, err, ev.Policy)
		}
		var asked *Policy
		got := lookupPolicyEvent(ev, func(q *Policy) (Policy, error) { asked = q; return answer, nil })
		if asked == nil || asked.Index != p.Index || asked.Dir != p.Dir {
			t.Fatalf("%v: the lookup was not asked for policy %#x: %+v", ev.Kind, p.Index, asked)
		}
		if got.Kind != ev.Kind || !got.Policy.SecCtx || got.Policy.Unconfirmed {
			t.Fatalf("%v: the lookup's context was lost: %v %+v", ev.Kind, got.Kind, got.Policy)
		}
		if ev.Policy.SecCtx {
			t.Fatal("the notification's own policy was modified in place")
		}

		gone := lookupPolicyEvent(ev, func(*Policy) (Policy, error) { return Policy{}, unix.ENOENT })
		if gone.Kind != ev.Kind || !gone.Policy.Unconfirmed {
			t.Fatalf("%v: a policy gone before its lookup came out certain: %v %+v", ev.Kind, gone.Kind, gone.Policy)
		}
		failed := lookupPolicyEvent(ev, func(*Policy) (Policy, error) { return Policy{}, unix.ENOBUFS })
		if failed.Kind != Resync || failed.Err == nil {
			t.Fatalf("%v: a failed lookup did not force a resync: %v %+v", ev.Kind, failed.Kind, failed.Policy)
		}
	}
	// Other events are passed through without a lookup.
	del, _, _ := decodeXFRMEvent(nl.XFRM_MSG_DELPOLICY, append(make([]byte, xfrmPolicyIDLen), nlAttr(nl.XFRMA_POLICY, notified[:xfrmPolicyInfoLen])...))
	lookupPolicyEvent(del, func(*Policy) (Policy, error) { t.Fatal("a delete was looked up"); return Policy{}, nil })
}

// Policies added and replaced at runtime are looked up in the real kernel
// and come out equal to the dump's entries, for every shape the lookup must
// name exactly (mark, if_id, sub type, each direction); policies deleted
// before their notification is read come out unconfirmed, never certain.
// A policy given a security context is also added, to record what a kernel
// without an LSM does with it (6.18 without SELinux accepts it and drops
// the context: the dump has none either).
func TestWatchPolicyEventsMatchDump(t *testing.T) {
	ns, h := testutil.NewNetNS(t)
	w, _ := watchXFRM(t, h)
	const n, deleted = 120, 25 // n well past the channel (64): the watch blocks mid-way
	tmpl := "tmpl src 192.0.2.1 dst 192.0.2.2 proto esp reqid 1 mode tunnel"
	var lines []string
	for i := range n {
		extra := ""
		switch i % 5 {
		case 1:
			extra = "mark 0x10 mask 0xff"
		case 2:
			extra = "if_id 7"
		case 3:
			extra = "ptype sub"
		case 4:
			extra = `ctx "system_u:object_r:ipsec_spd_t:s0"`
		}
		dir := []string{"out", "in", "fwd"}[i%3]
		lines = append(lines, fmt.Sprintf("xfrm policy add src 10.%d.%d.0/24 dst 10.200.0.0/24 dir %s priority %d %s %s",
			i/256, i%256, dir, 100+i, extra, tmpl))
	}
	lines = append(lines, "xfrm policy update src 10.0.0.0/24 dst 10.200.0.0/24 dir out priority 5 "+tmpl)
	testutil.IPBatch(t, ns, lines)
	// The last ones go before the watch can have read their notifications.
	lines = lines[:0]
	for i := n - deleted; i < n; i++ {
		dir := []string{"out", "in", "fwd"}[i%3]
		extra := ""
		switch i % 5 {
		case 1:
			extra = "mark 0x10 mask 0xff"
		case 2:
			extra = "if_id 7"
		case 3:
			extra = "ptype sub"
		}
		lines = append(lines, fmt.Sprintf("xfrm policy delete src 10.%d.%d.0/24 dst 10.200.0.0/24 dir %s %s", i/256, i%256, dir, extra))
	}
	testutil.IPBatch(t, ns, lines)
	dump, err := HandleAt(h).DumpPolicies()
	if err != nil {
		t.Fatal(err)
	}
	if len(dump) != n-deleted {
		t.Fatalf("dump: %d policies, want %d", len(dump), n-deleted)
	}
	last := map[uint32]*Policy{}
	var dels int
	for dels < deleted {
		ev := nextEvent(t, w.Events)
		switch ev.Kind {
		case PolicyNew, PolicyUpd:
			last[ev.Policy.Index] = ev.Policy
		case PolicyDel:
			dels++
		default:
			t.Fatalf("unexpected %v event: %v", ev.Kind, ev.Err)
		}
	}
	if len(last) != n {
		t.Fatalf("%d policies notified, want %d", len(last), n)
	}
	for _, d := range dump {
		got, ok := last[d.Index]
		if !ok {
			t.Fatalf("policy %d (%s) never notified", d.Index, d.Sel)
		}
		if !reflect.DeepEqual(*got, d) {
			t.Errorf("policy %d: event %+v\n  dump %+v", d.Index, *got, d)
		}
		delete(last, d.Index)
	}
	for i, p := range last { // the deleted ones
		if !p.Unconfirmed {
			t.Errorf("policy %d (%s) was deleted before its lookup but came out certain", i, p.Sel)
		}
	}
	var labelled int
	for _, d := range dump {
		if d.SecCtx {
			labelled++
		}
	}
	t.Logf("policies added with a security context and kept with one by this kernel: %d", labelled)
}

// BenchmarkPolicyLookup is the cost the watch adds per NEW/UPD policy
// notification: one XFRM_MSG_GETPOLICY by index among 10,000 policies.
func BenchmarkPolicyLookup(b *testing.B) {
	ns, h := testutil.NewNetNS(b)
	var lines []string
	for i := range 10000 {
		lines = append(lines, fmt.Sprintf("xfrm policy add src 10.%d.%d.0/24 dst 10.200.0.0/24 dir out tmpl src 192.0.2.1 dst 192.0.2.2 proto esp reqid 1 mode tunnel", i/256, i%256))
	}
	testutil.IPBatch(b, ns, lines)
	x := HandleAt(h)
	pols, err := x.DumpPolicies()
	if err != nil {
		b.Fatal(err)
	}
	s, err := nl.GetNetlinkSocketAt(x.target(), netns.None(), unix.NETLINK_XFRM)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ResetTimer()
	for i := range b.N {
		if _, err := lookupPolicyOn(s, &pols[i%len(pols)]); err != nil {
			b.Fatal(err)
		}
	}
}
