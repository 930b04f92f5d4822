// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"errors"
	"log/slog"
	"net/netip"
	"reflect"
	"sync"
	"syscall"
	"time"

	"sluice/internal/fastpath"
	"sluice/internal/kernel/tcflower"
	"sluice/internal/kernel/xfrm"
)

// withdrawal removes forwarding rules straight from the mirror's XFRM
// events (fastpath.EventTier), before the mirror's debounce and the full
// derive: a hardware rule redirects cleartext into the NIC for as long as
// it outlives what it depends on, and at 65,536 tunnels the derive alone
// takes seconds.
//
// A rule for policy P depends on (Derive, uniform): P itself, every
// policy whose selector overlaps P's (any direction), the FWD default,
// and the SAs P's template resolves to being packet-offloaded on the
// rule's device. So an event withdraws P's rules when
//   - a policy overlapping P's selector is added, deleted, hard-expired
//     or changed (an update that changes nothing, as strongSwan sends when
//     a rekeyed CHILD_SA takes over a policy, withdraws nothing);
//   - an SA in P's template's (destination, reqid) bucket is added,
//     changed, deleted or hard-expired and the mirror's current SAs no
//     longer packet-offload P's template on that device (a rekey, new
//     offloaded SA then old deleted, keeps the rule);
//   - a flush, or the FWD default turning to block: every rule.
//
// Lookups go through indexes (template bucket, selector overlap), so an
// event costs O(affected rules), not O(tunnels). When unsure, the rule
// goes: the event also makes the mirror publish, and the derive of that
// snapshot re-adds what is still right.
//
// The worker may be deriving or installing from a snapshot older than an
// event while it arrives; every event is kept in a log with the snapshot
// generation it postdates, and each derive replays the events newer than
// its snapshot before installing anything. Rules the worker installs
// while an event withdraws their policy are removed when its apply ends.
type withdrawal struct {
	mu sync.Mutex
	fs *tcflower.Socket // its own: the worker's may be busy with a long apply
	// gen counts snapshots handed to Update; an event is newer than every
	// snapshot up to gen.
	gen uint64
	// What the rules being installed or installed depend on, from the last
	// prepare.
	deps     map[uint32]dep
	byBucket map[bucketKey][]uint32
	sels     *viewIndex
	selIdx   []uint32 // sels' view positions -> policy index
	// handles: policy -> its installed forwarding filters (from the last
	// settle); withdrawn: filters removed here that the installer still
	// lists (it forgets them before its next apply); killed: policies
	// withdrawn since the last prepare.
	handles   map[uint32][]installedRef
	withdrawn []installedRef
	log       []damage
	count     uint64 // rules withdrawn from events
	// killed has a lock of its own, taken last: the installer asks it
	// between chunks of an apply while holding its own lock.
	killedMu sync.Mutex
	killed   map[uint32]bool
}

type dep struct {
	policy xfrm.Policy
	dev    int // the offload device its SAs must stay on
}

type bucketKey struct {
	dst   netip.Addr
	reqid uint32
}

// installedRef is an installed forward as a delete needs it (device,
// chain, priority, protocol, handle), and its installer key: a few words
// each, kept for every installed rule.
type installedRef struct {
	key    string
	dev    int
	chain  uint32
	handle uint32
	pref   uint16
	vlan   uint16
	v6     bool
}

func (r installedRef) filter() *tcflower.Filter {
	return &tcflower.Filter{Ifindex: r.dev, Chain: r.chain, Pref: r.pref, Handle: r.handle, VLANID: r.vlan, IPv6: r.v6}
}

// damage is one event in the terms of what it can break.
type damage struct {
	gen    uint64
	all    bool            // a flush, the FWD default turning to block
	sels   []xfrm.Selector // policy changes: rules overlapping these
	bucket *bucketKey      // SA changes: rules whose template is here...
	// ...unless the event's own check found them still served by an SA on
	// this device (policy -> device).
	spared map[uint32]int
}

func (w *withdrawal) open() error {
	fs, err := tcflower.Open()
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.fs = fs
	w.mu.Unlock()
	return nil
}

func (w *withdrawal) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fs != nil {
		w.fs.Close()
		w.fs = nil
	}
}

// published records a new snapshot and returns its generation.
func (w *withdrawal) published() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	return w.gen
}

// Withdraw implements fastpath.EventTier: remove, now, the rules the
// change took the ground from.
func (t *Tier) Withdraw(c fastpath.XFRMChange, cur fastpath.CurrentState) {
	t.wd.event(c, cur, t.Log)
}

func (w *withdrawal) event(c fastpath.XFRMChange, cur fastpath.CurrentState, log *slog.Logger) {
	start := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fs == nil {
		return // not running
	}
	d, ok := damageOf(c, w.gen)
	if !ok {
		return
	}
	hit := w.hits(&d, cur)
	w.log = append(w.log, d)
	if n := w.remove(hit, log); n > 0 {
		log.Info("flower: rules withdrawn on an XFRM event, ahead of the derive", "event", c.Kind, "rules", n, "took", time.Since(start))
	}
}

// damageOf says what an event can break; ok is false when nothing.
func damageOf(c fastpath.XFRMChange, gen uint64) (d damage, ok bool) {
	if c.Policy != nil && c.Policy.Dir > xfrm.DirFwd {
		return d, false // socket policies never meet forwarded traffic
	}
	d.gen = gen
	switch c.Kind {
	case xfrm.PolicyNew, xfrm.PolicyUpd:
		if c.Prev != nil && reflect.DeepEqual(*c.Prev, *c.Policy) {
			return d, false // strongSwan re-installs policies unchanged on a rekey
		}
		d.sels = append(d.sels, c.Policy.Sel)
		if c.Prev != nil && c.Prev.Sel != c.Policy.Sel {
			d.sels = append(d.sels, c.Prev.Sel)
		}
	case xfrm.PolicyDel, xfrm.PolicyExpire:
		if c.Kind == xfrm.PolicyExpire && !c.Hard {
			return d, false
		}
		d.sels = append(d.sels, c.Policy.Sel)
		if c.Prev != nil && c.Prev.Sel != c.Policy.Sel {
			d.sels = append(d.sels, c.Prev.Sel)
		}
	case xfrm.PolicyFlush:
		d.all = true
	case xfrm.PolicyDefault:
		if c.Default == nil || c.PrevFwdBlock || c.Default.Fwd != xfrm.ActionBlock {
			return d, false
		}
		d.all = true
	case xfrm.StateNew, xfrm.StateUpd, xfrm.StateDel, xfrm.StateExpire:
		// An added or changed SA can break a template too: one that is not
		// packet-offloaded on the rule's device makes the kernel's choice
		// uncertain for XDP, so the rule goes.
		if c.Kind == xfrm.StateExpire && !c.Hard || c.State.Proto != xfrm.ProtoESP {
			return d, false // a soft expire; templates are ESP
		}
		d.bucket, d.spared = &bucketKey{c.State.Dst, c.State.Reqid}, map[uint32]int{}
	case xfrm.StateFlush:
		if c.State != nil && c.State.Proto != 0 && c.State.Proto != xfrm.ProtoESP {
			return d, false
		}
		d.all = true
	default:
		return d, false
	}
	return d, true
}

// hits returns the policies in deps that d breaks; with cur (live, on the
// mirror's goroutine) an SA event is checked against the mirror's current
// SAs and what survives is noted in d.spared. Without cur (a replay), an
// SA event breaks every policy in its bucket it did not spare.
func (w *withdrawal) hits(d *damage, cur fastpath.CurrentState) []uint32 {
	var out []uint32
	switch {
	case d.all:
		for idx := range w.deps {
			out = append(out, idx)
		}
	case d.bucket != nil:
		// A template with the SA's reqid, or without one (it takes any SA
		// to its destination), can resolve to the SA.
		buckets := []bucketKey{*d.bucket}
		if d.bucket.reqid != 0 {
			buckets = append(buckets, bucketKey{d.bucket.dst, 0})
		}
		for _, b := range buckets {
			for _, idx := range w.byBucket[b] {
				dp, ok := w.deps[idx]
				if !ok {
					continue // withdrawn already
				}
				if dev, ok := d.spared[idx]; ok && dev == dp.dev {
					continue
				}
				if cur != nil {
					tm := dp.policy.Tmpls[0]
					if fastpath.OffloadDevice(&dp.policy, cur.StatesFor(tm.Dst, tm.Reqid)) == dp.dev {
						d.spared[idx] = dp.dev
						continue
					}
				}
				out = append(out, idx)
			}
		}
	default:
		if w.sels == nil {
			return nil
		}
		for _, s := range d.sels {
			for _, i := range w.sels.overlapping(s) {
				out = append(out, w.selIdx[i])
			}
		}
	}
	return out
}

// remove withdraws the policies' forwarding rules: those installed are
// deleted now through w's own socket; those still being installed go when
// the worker's apply ends (settle). Guards stay: they only pass packets
// to the host.
func (w *withdrawal) remove(policies []uint32, log *slog.Logger) int {
	var refs []installedRef
	for _, idx := range policies {
		if _, ok := w.deps[idx]; !ok {
			continue
		}
		delete(w.deps, idx)
		w.kill(idx)
		refs = append(refs, w.handles[idx]...)
		delete(w.handles, idx)
	}
	if len(refs) == 0 {
		return 0
	}
	del := make([]*tcflower.Filter, len(refs))
	for i, r := range refs {
		del[i] = r.filter()
	}
	errs, err := w.fs.Del(del)
	if err != nil {
		// The worker's settle removes them through the installer.
		log.Warn("flower: withdrawing rules; the apply in progress removes them", "err", err)
		return 0
	}
	n := 0
	for i, e := range errs {
		if e != nil && !errors.Is(e, syscall.ENOENT) {
			log.Warn("flower: withdrawing a rule; the apply in progress removes it", "err", e)
			continue
		}
		w.withdrawn = append(w.withdrawn, refs[i])
		n++
	}
	w.count += uint64(n)
	return n
}

// prepare runs on the worker before it installs rules derived from the
// snapshot of generation gen: the installer forgets what events removed,
// the dependency indexes are rebuilt for rules, and the events newer than
// the snapshot are replayed on them. It returns the rules that survive and
// adds a skip for each withdrawn forward. The indexes are built before
// taking the lock: an event waits only for the swap and the replay.
func (w *withdrawal) prepare(inst *Installer, rules []Rule, views []fastpath.PolicyView, gen uint64, skips *[]Skip) []Rule {
	want := map[uint32]bool{}
	for _, r := range rules {
		if r.Kind == KindForward {
			want[r.PolicyIndex] = true
		}
	}
	deps, byBucket := map[uint32]dep{}, map[bucketKey][]uint32{}
	sel := &Input{}
	var selIdx []uint32
	for _, v := range views {
		p := v.Policy
		if !want[p.Index] || len(p.Tmpls) == 0 {
			continue
		}
		deps[p.Index] = dep{policy: p, dev: v.OffloadIfindex}
		b := bucketKey{p.Tmpls[0].Dst, p.Tmpls[0].Reqid}
		byBucket[b] = append(byBucket[b], p.Index)
		sel.Views = append(sel.Views, v)
		selIdx = append(selIdx, p.Index)
	}
	sels := sel.index()

	w.mu.Lock()
	defer w.mu.Unlock()
	inst.forget(w.withdrawn)
	w.withdrawn = nil
	w.deps, w.byBucket, w.sels, w.selIdx = deps, byBucket, sels, selIdx
	w.takeKilled()
	// Replay what happened after the snapshot; forget what it includes.
	keep := w.log[:0]
	gone := map[uint32]bool{}
	for i := range w.log {
		d := w.log[i]
		if d.gen < gen {
			continue
		}
		keep = append(keep, d)
		for _, idx := range w.hits(&d, nil) {
			gone[idx] = true
		}
	}
	w.log = keep
	if len(gone) == 0 {
		return rules
	}
	out := rules[:0]
	for _, r := range rules {
		if r.Kind == KindForward && gone[r.PolicyIndex] {
			*skips = append(*skips, Skip{PolicyIndex: r.PolicyIndex, Port: r.Port, Reason: "withdrawn: an XFRM event since this snapshot took its ground; the next snapshot decides"})
			continue
		}
		out = append(out, r)
	}
	for idx := range gone {
		delete(w.deps, idx)
	}
	return out
}

// settle runs on the worker once an apply ended: rules it installed for a
// policy an event withdrew meanwhile are removed, and the handles Withdraw
// deletes by are refreshed from the installer (read before taking the
// lock; policies withdrawn since are left out of them).
func (w *withdrawal) settle(inst *Installer, log *slog.Logger) {
	handles := inst.forwardHandles()
	w.mu.Lock()
	defer w.mu.Unlock()
	inst.forget(w.withdrawn)
	w.withdrawn = nil
	if killed := w.takeKilled(); len(killed) > 0 {
		n, err := inst.removeForwards(killed)
		if err != nil {
			log.Warn("flower: removing withdrawn rules the apply installed", "err", err)
		}
		w.count += uint64(n)
		for idx := range killed {
			delete(handles, idx)
		}
	}
	w.handles = handles
}

func (w *withdrawal) kill(policy uint32) {
	w.killedMu.Lock()
	defer w.killedMu.Unlock()
	if w.killed == nil {
		w.killed = map[uint32]bool{}
	}
	w.killed[policy] = true
}

// takeKilled returns the policies withdrawn since the last call and
// starts a new set.
func (w *withdrawal) takeKilled() map[uint32]bool {
	w.killedMu.Lock()
	defer w.killedMu.Unlock()
	k := w.killed
	w.killed = nil
	return k
}

// withdrew is Installer.Withdrawn: did an event withdraw the policy since
// the apply's prepare?
func (w *withdrawal) withdrew(policy uint32) bool {
	w.killedMu.Lock()
	defer w.killedMu.Unlock()
	return w.killed[policy]
}

// withdrawnRules returns how many rules events withdrew.
func (w *withdrawal) withdrawnRules() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count
}

// forget drops rules removed behind the installer's back (by handle: a
// rule re-added since under a new handle stays).
func (in *Installer) forget(refs []installedRef) {
	if len(refs) == 0 {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, r := range refs {
		if v, ok := in.installed[r.key]; ok && v.handle == r.handle {
			delete(in.installed, r.key)
		}
	}
}

// removeForwards deletes the installed forwarding rules of the policies.
func (in *Installer) removeForwards(policies map[uint32]bool) (int, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	var keys []string
	for k, v := range in.installed {
		if v.rule.Kind == KindForward && policies[v.rule.PolicyIndex] {
			keys = append(keys, k)
		}
	}
	n, failed, err := in.removeKeys(keys)
	if err != nil {
		return n, err
	}
	return n, errors.Join(failed...)
}

// forwardHandles returns the installed forwarding filters per policy.
func (in *Installer) forwardHandles() map[uint32][]installedRef {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[uint32][]installedRef{}
	for k, v := range in.installed {
		if v.rule.Kind == KindForward {
			r := v.rule
			out[r.PolicyIndex] = append(out[r.PolicyIndex], installedRef{key: k, dev: r.Dev, chain: r.Chain, handle: v.handle,
				pref: r.Pref, vlan: r.VLANID, v6: r.IPv6})
		}
	}
	return out
}
