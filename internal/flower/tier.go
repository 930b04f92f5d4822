// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"sluice/internal/api"
	"sluice/internal/fastpath"
	"sluice/internal/kernel"
	"sluice/internal/kernel/tcflower"
)

// PortConfig is one gateway.yaml interface as the tier needs it, by name:
// names are resolved on every update, so a renamed or deleted interface
// loses its rules at the next one.
type PortConfig struct {
	Name           string
	Outbound       bool
	Inbound        bool
	InboundForward bool
	TTL            bool
	L2FIB          bool
	HairpinNextHop netip.Addr
	Budget         int // forwarding rules on this port's filter device
}

// Tier runs the flower tier: the gateway's mirror hands it every snapshot
// it publishes (Update) and tells it when the fast path closes (Close).
// A worker derives and installs in the background, latest snapshot wins;
// Close is synchronous: it returns once every rule is removed.
type Tier struct {
	Ports        []PortConfig
	SkipHW       bool // labs only (flower-test-skip-hw)
	InboundChain uint32
	// UseTime: each forward hands the kernel one packet a second, so the
	// kernel stamps the XFRM policies' use times (kernel policy source).
	UseTime bool
	Log     *slog.Logger
	// Router answers the FIB per prefix (default: the kernel's).
	Router Router
	// Placement, when set, puts only tunnels with steady traffic in the
	// NIC; nil: every eligible tunnel (within the budget).
	Placement *Placement
	// Counters returns the XDP per-policy packet counters (placement).
	Counters func() (map[uint32]uint64, error)
	// AcceptNoTXMiss: the operator accepts no-tx-miss-rule (gateway.yaml
	// accept-leaks): outbound rules go onto such a device too, and the
	// moment between an SA's deletion and the rule's withdrawal may send
	// cleartext (docs/flower.md).
	AcceptNoTXMiss bool

	mu      sync.Mutex
	cond    *sync.Cond
	want    *fastpath.Snapshot // nil: closed (no rules)
	seq     uint64
	applied uint64
	status  api.FlowerStatus
	inst    *Installer
	probes  map[string]ProbeResult // "ifindex/chain"
	// eligible: policy index -> filter device, from the last apply
	// (placement reads it between applies, under mu).
	eligible map[uint32]int
	// free: rule slots left in each filter device's budget after the last
	// apply (-1: no budget); placement promotes only into a free slot.
	free map[int]int
	// why: placement's reason per forwarding rule of the last apply.
	why map[uint32]string
	// wd withdraws rules straight from XFRM events (withdraw.go);
	// wantGen is want's generation there.
	wd      withdrawal
	wantGen uint64
	// announced: the device quirks logged so far, by device (the worker's).
	announced map[string]DeviceQuirks
}

// KernelRouter is the kernel's FIB as a Router.
type KernelRouter struct{}

// Route implements Router.
func (KernelRouter) Route(dst netip.Prefix) (NextHop, string) {
	r, why, err := kernel.RoutePrefix(dst)
	if err != nil {
		return NextHop{}, err.Error()
	}
	if why != "" {
		return NextHop{}, why
	}
	return NextHop{Ifindex: r.Ifindex, Name: r.Name, ParentIfindex: r.ParentIfindex, ParentName: r.ParentName,
		VLANID: r.VLANID, DstMAC: r.DstMAC, SrcMAC: r.SrcMAC, MTU: r.MTU}, ""
}

// Source implements Router.
func (KernelRouter) Source(src netip.Prefix, ingress int) ([]netip.Addr, string) {
	own, why, err := kernel.SourceAccepted(src, ingress)
	if err != nil {
		return nil, err.Error()
	}
	return own, why
}

// Run opens the netlink socket, removes what a previous daemon left at
// sluice's priorities on the ports (it may have been killed), and applies
// snapshots until ctx ends; then it removes every rule. Call it from the
// network namespace that owns the ports.
func (t *Tier) Run(ctx context.Context) error {
	if t.Log == nil {
		t.Log = slog.Default()
	}
	if t.Router == nil {
		t.Router = KernelRouter{}
	}
	fs, err := tcflower.Open()
	if err != nil {
		return err
	}
	defer fs.Close()
	if err := t.wd.open(); err != nil {
		return err
	}
	defer t.wd.close()
	t.mu.Lock()
	t.cond = sync.NewCond(&t.mu)
	t.inst = &Installer{FS: fs, SkipHW: t.SkipHW, Withdrawn: t.wd.withdrew}
	t.probes = map[string]ProbeResult{}
	t.mu.Unlock()
	if removed, _, err := t.inst.Reconcile(t.filterDevs()); err != nil {
		t.Log.Warn("flower: removing a previous daemon's rules", "err", err)
	} else if removed > 0 {
		t.Log.Info("flower: removed rules a previous daemon left", "rules", removed)
	}
	go func() {
		<-ctx.Done()
		t.mu.Lock()
		t.want, t.seq = nil, t.seq+1
		t.cond.Broadcast()
		t.mu.Unlock()
	}()
	go t.followRoutes(ctx)
	if t.Placement != nil && t.Counters != nil {
		go t.place(ctx)
	}
	for {
		t.mu.Lock()
		for t.applied == t.seq && ctx.Err() == nil {
			t.cond.Wait()
		}
		want, seq, gen := t.want, t.seq, t.wantGen
		t.mu.Unlock()
		t.apply(want, gen)
		t.mu.Lock()
		t.applied = seq
		t.cond.Broadcast()
		done := ctx.Err() != nil && t.applied == t.seq
		t.mu.Unlock()
		if done {
			return nil
		}
	}
}

// Update implements fastpath.HardwareTier: derive and install from snap
// (in the background; a newer snapshot replaces one not yet applied).
func (t *Tier) Update(snap fastpath.Snapshot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cond == nil {
		return
	}
	t.want, t.seq = &snap, t.seq+1
	t.wantGen = t.wd.published()
	t.cond.Broadcast()
}

// Close implements fastpath.HardwareTier: remove every rule now and wait
// for it (the mirror lost sync or failed; the kernel decides until the
// next Update).
func (t *Tier) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cond == nil {
		return
	}
	t.want, t.seq = nil, t.seq+1
	seq := t.seq
	t.cond.Broadcast()
	for t.applied < seq {
		t.cond.Wait()
	}
}

// FlowerStatus implements fastpath.HardwareTier.
func (t *Tier) FlowerStatus() api.FlowerStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.status
	s.RulesWithdrawn = t.wd.withdrawnRules()
	s.Skips = append([]api.FlowerSkip(nil), s.Skips...)
	s.Rules = append([]api.FlowerRule(nil), s.Rules...) // apply and placement rewrite them in place
	s.Devices = append([]api.FlowerDevice(nil), s.Devices...)
	return s
}

// filterDevs are the devices the configured ports' rules sit on.
func (t *Tier) filterDevs() []int {
	var devs []int
	for _, p := range t.resolvePorts() {
		if p.ParentIfindex != 0 {
			devs = append(devs, p.ParentIfindex)
		} else {
			devs = append(devs, p.Ifindex)
		}
	}
	return devs
}

func (t *Tier) resolvePorts() []Port {
	var out []Port
	for _, pc := range t.Ports {
		li, err := kernel.Link(pc.Name)
		if err != nil {
			continue // gone or renamed: no rules for it
		}
		p := Port{Name: pc.Name, Ifindex: li.Ifindex, MAC: li.MAC, ParentIfindex: li.ParentIfindex, VLANID: li.VLANID,
			Outbound: pc.Outbound, Inbound: pc.Inbound, InboundForward: pc.InboundForward, TTL: pc.TTL, L2FIB: pc.L2FIB,
			Budget: pc.Budget}
		if li.ParentIfindex != 0 {
			if pl, err := kernel.LinkByIndex(li.ParentIfindex); err == nil {
				p.ParentName = pl.Name
			}
		}
		if pc.HairpinNextHop.IsValid() {
			r, why := t.Router.Route(netip.PrefixFrom(pc.HairpinNextHop, pc.HairpinNextHop.BitLen()))
			if why == "" && r.DstMAC != nil {
				p.Hairpin = &r
			}
		}
		out = append(out, p)
	}
	return out
}

func (t *Tier) budget(dev int, ports []Port) int {
	b := 0
	for _, p := range ports {
		if (p.Ifindex == dev || p.ParentIfindex == dev) && (b == 0 || p.Budget < b) {
			b = p.Budget
		}
	}
	return b
}

// apply derives the rules for want (nil: none) and installs them, leaving
// out devices that refuse skip_sw and rules beyond a device's budget.
func (t *Tier) apply(want *fastpath.Snapshot, gen uint64) {
	var res Result
	var views []fastpath.PolicyView
	ports := t.resolvePorts()
	if want != nil {
		views = fastpath.PolicyViews(*want)
		res = Derive(Input{Views: views, FwdDefaultBlock: want.FwdDefaultBlock,
			Ports: ports, Router: t.Router, InboundChain: t.InboundChain, UseTime: t.UseTime,
			Quirks: t.deviceQuirks(views, want.Quirks)})
	} else {
		gen = math.MaxUint64 // closed: no event is newer than "no rules"
	}
	var rules []Rule
	perDev := map[int]int{}
	eligible := map[uint32]int{}
	why := map[uint32]string{}
	devs := map[string]api.FlowerDevice{}
	sort.SliceStable(res.Rules, func(a, b int) bool { return res.Rules[a].PolicyIndex < res.Rules[b].PolicyIndex })
	for _, r := range res.Rules {
		key := fmt.Sprintf("%d/%d", r.Dev, r.Chain)
		p, seen := t.probes[key]
		if !seen {
			if err := tcflower.EnsureClsact(r.Dev); err != nil {
				p = ProbeResult{Msg: err.Error()}
			} else if t.SkipHW {
				p = ProbeResult{OK: true, Msg: "lab: software rules (skip_hw)"}
			} else {
				p = Probe(t.inst.FS, r.Dev, r.Chain)
			}
			t.probes[key] = p
			if !p.OK {
				t.Log.Warn("flower: "+ExplainRefusal(r.DevName, p), "dev", r.DevName, "chain", r.Chain)
			}
		}
		devs[key] = api.FlowerDevice{Name: r.DevName, Chain: r.Chain, HardwareOK: p.OK, Busy: p.Busy, Message: p.Msg}
		if !p.OK {
			if r.Kind == KindForward {
				res.Skips = append(res.Skips, Skip{PolicyIndex: r.PolicyIndex, Port: r.Port, Reason: "device refused skip_sw rules: XDP serves it"})
			}
			continue
		}
		if r.Kind == KindForward {
			eligible[r.PolicyIndex] = r.Dev
			if t.Placement != nil {
				t.mu.Lock()
				on, reason := t.Placement.OnFlower(r.PolicyIndex)
				t.mu.Unlock()
				if !on {
					res.Skips = append(res.Skips, Skip{PolicyIndex: r.PolicyIndex, Port: r.Port, Reason: reason})
					continue
				}
				why[r.PolicyIndex] = reason
			}
			if b := t.budget(r.Dev, ports); b > 0 && perDev[r.Dev] >= b {
				res.Skips = append(res.Skips, Skip{PolicyIndex: r.PolicyIndex, Port: r.Port, Reason: fmt.Sprintf("budget: %d rules on %s already; XDP serves it", b, r.DevName)})
				continue
			}
			perDev[r.Dev]++
		}
		rules = append(rules, r)
	}
	// Events newer than want withdraw their rules before anything is
	// installed.
	rules = withGuardsInUse(t.wd.prepare(t.inst, rules, views, gen, &res.Skips))
	st, errs, err := t.inst.Apply(rules)
	for _, e := range errs {
		t.Log.Warn("flower: rule refused; XDP serves its traffic", "err", e)
	}
	if err != nil {
		// Outcome unknown: trust the devices, not our memory.
		t.Log.Warn("flower: netlink failed; reconciling from a dump", "err", err)
		if _, _, rerr := t.inst.Reconcile(t.filterDevs()); rerr != nil {
			t.Log.Error("flower: reconcile failed", "err", rerr)
		}
	}
	t.wd.settle(t.inst, t.Log)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.eligible, t.why = eligible, why
	t.free = map[int]int{}
	for _, dev := range eligible {
		t.free[dev] = -1
		if b := t.budget(dev, ports); b > 0 {
			t.free[dev] = max(b-perDev[dev], 0)
		}
	}
	t.status.Enabled = true
	t.status.SkipHW = t.SkipHW
	t.status.RulesInstalled = t.inst.Installed()
	t.status.RulesAdded += uint64(st.Added)
	t.status.RulesRemoved += uint64(st.Removed)
	t.status.RulesRefused += uint64(st.Refused)
	t.status.Skips = t.status.Skips[:0]
	for _, s := range res.Skips {
		t.status.Skips = append(t.status.Skips, api.FlowerSkip{PolicyIndex: s.PolicyIndex, Port: s.Port, Reason: s.Reason})
	}
	t.status.Rules = t.status.Rules[:0]
	for _, r := range rules {
		if r.Kind == KindForward {
			t.status.Rules = append(t.status.Rules, api.FlowerRule{PolicyIndex: r.PolicyIndex, Dir: r.Dir.String(), Port: r.Port, Rule: r.String(), Reason: why[r.PolicyIndex]})
		}
	}
	t.status.Devices = t.status.Devices[:0]
	for _, d := range devs {
		t.status.Devices = append(t.status.Devices, d)
	}
	sort.Slice(t.status.Devices, func(a, b int) bool { return t.status.Devices[a].Name < t.status.Devices[b].Name })
}

// followRoutes re-derives from the current snapshot when routes or
// neighbours change (a rule's egress and MACs come from them), at most
// every 100 ms, and every RefreshEvery regardless (a lost event, a renamed
// interface).
func (t *Tier) followRoutes(ctx context.Context) {
	ch, err := kernel.WatchNeighRoutes(ctx)
	if err != nil {
		t.Log.Warn("flower: not following route changes; rules are re-derived every "+RefreshEvery.String(), "err", err)
	}
	tick := time.NewTicker(RefreshEvery)
	defer tick.Stop()
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ch:
			if !ok {
				ch = nil
			} else if debounce == nil {
				debounce = time.After(100 * time.Millisecond)
			}
		case <-debounce:
			debounce = nil
			t.rederive()
		case <-tick.C:
			t.rederive()
		}
	}
}

// RefreshEvery is how often the tier re-derives without an event.
var RefreshEvery = 10 * time.Second

// Rederive re-derives and re-installs from the current snapshot now: the
// daemon calls it when a port came back (re-created under its name), whose
// rules went with the old device.
func (t *Tier) Rederive() { t.rederive() }

func (t *Tier) rederive() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.want != nil {
		t.seq++
		t.cond.Broadcast()
	}
}

// withGuardsInUse drops guards whose device, chain, VLAN and family carry
// no forwarding rule (placement or the budget left them empty): a guard
// only matters in front of a forward, and each costs a flow-table slot.
func withGuardsInUse(rules []Rule) []Rule {
	type group struct {
		dev   int
		chain uint32
		vlan  uint16
		v6    bool
	}
	used := map[group]bool{}
	for _, r := range rules {
		if r.Kind == KindForward {
			used[group{r.Dev, r.Chain, r.VLANID, r.IPv6}] = true
		}
	}
	out := rules[:0]
	for _, r := range rules {
		if r.Kind == KindForward || used[group{r.Dev, r.Chain, r.VLANID, r.IPv6}] {
			out = append(out, r)
		}
	}
	return out
}

// place feeds the placement with counters every interval and re-derives
// when a tunnel changes tier.
func (t *Tier) place(ctx context.Context) {
	tick := time.NewTicker(t.Placement.Interval)
	defer tick.Stop()
	// last is when the counters were last observed: a skipped reading
	// (an apply running, an error) must not turn two intervals' packets
	// into one interval's rate.
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			xdp, err := t.Counters()
			if err != nil {
				t.Log.Warn("flower placement: XDP counters", "err", err)
				continue
			}
			// The installer is the worker's: read rule stats through it
			// only while no apply runs.
			t.mu.Lock()
			busy := t.applied != t.seq
			t.mu.Unlock()
			if busy {
				continue
			}
			hw, err := t.inst.RulePackets()
			if err != nil {
				t.Log.Warn("flower placement: rule statistics", "err", err)
				continue
			}
			now := time.Now()
			dt := now.Sub(last)
			last = now
			changed := false
			t.mu.Lock()
			for idx, dev := range t.eligible {
				on, _ := t.Placement.OnFlower(idx)
				pk := xdp[idx]
				if on {
					pk = hw[idx]
				}
				if t.Placement.Observe(idx, pk, dt, t.free[dev] != 0) {
					changed = true
					if on, _ := t.Placement.OnFlower(idx); on && t.free[dev] > 0 {
						t.free[dev]-- // two promotions in one reading never overfill the budget
					}
				}
			}
			t.Placement.Forget(func(i uint32) bool { _, ok := t.eligible[i]; return ok })
			t.refreshPlacementReasons()
			t.status.Promotions, t.status.Demotions = t.Placement.Promotions, t.Placement.Demoted
			if changed && t.want != nil {
				t.seq++
				t.cond.Broadcast()
			}
			t.mu.Unlock()
		}
	}
}

// refreshPlacementReasons rewrites the placement reasons `show gateway`
// and `explain` read with this reading's rates (an apply runs only when a
// tunnel changes tier). Call with mu held.
func (t *Tier) refreshPlacementReasons() {
	for i, r := range t.status.Rules {
		if _, ok := t.why[r.PolicyIndex]; ok {
			_, t.status.Rules[i].Reason = t.Placement.OnFlower(r.PolicyIndex)
		}
	}
	for i, sk := range t.status.Skips {
		if strings.HasPrefix(sk.Reason, placementReason) {
			_, t.status.Skips[i].Reason = t.Placement.OnFlower(sk.PolicyIndex)
		}
	}
}

// UseCounters implements gateway.HardwareRunner.
func (t *Tier) UseCounters(f func() (map[uint32]uint64, error)) { t.Counters = f }
