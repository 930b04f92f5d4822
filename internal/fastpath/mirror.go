// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// Source is where the mirror reads XFRM state from.
type Source interface {
	// Dump returns the whole current state.
	Dump() (Snapshot, error)
	// Watch subscribes to changes; a nil watch means the source never
	// changes (static lab policies). Each call is a fresh subscription,
	// started before the Dump it goes with so that no change falls
	// between the two.
	Watch(ctx context.Context) (*xfrm.Watch, error)
}

// KernelSource reads the kernel's XFRM database (of one namespace).
type KernelSource struct{ X *xfrm.Handle }

// Dump implements Source.
func (k KernelSource) Dump() (Snapshot, error) {
	pols, err := k.X.DumpPolicies()
	if err != nil {
		return Snapshot{}, err
	}
	states, err := k.X.DumpStates()
	if err != nil {
		return Snapshot{}, err
	}
	// Only a kernel without policy defaults (before 5.16) means "accept";
	// any other failure leaves the FWD default unknown, and the fast path
	// must not guess it.
	d, err := k.X.PolicyDefaults()
	if err != nil && !errors.Is(err, xfrm.ErrNoPolicyDefaults) {
		return Snapshot{}, err
	}
	return Snapshot{Policies: pols, States: states, FwdDefaultBlock: d.Fwd == xfrm.ActionBlock}, nil
}

// Watch implements Source.
func (k KernelSource) Watch(ctx context.Context) (*xfrm.Watch, error) {
	return k.X.Watch(ctx)
}

// PathMTU looks up the route under an SA in the namespace k reads, where
// the kernel sends through the SA.
func (k KernelSource) PathMTU(src, dst netip.Addr) (int, int, error) {
	return kernel.RouteMTUAt(k.X.Netns(), src, dst)
}

// StaticSource is a fixed snapshot (lab configs, offline explain).
type StaticSource struct{ Snap Snapshot }

// Dump implements Source.
func (s StaticSource) Dump() (Snapshot, error) { return s.Snap, nil }

// Watch implements Source.
func (StaticSource) Watch(context.Context) (*xfrm.Watch, error) { return nil, nil }

// Mirror states, as MirrorStatus.State reports them.
const (
	StateInSync     = "in-sync"     // the tables equal the kernel's state; open
	StateCatchingUp = "catching-up" // dumped; applying what was queued before the dump ended
	StateVerifying  = "verifying"   // comparing the copy with a second dump
	StateClosed     = "closed"      // no usable copy (a dump or the tables failed); retrying
)

// MirrorStatus is what `sluice show gateway` reports about the mirror.
type MirrorStatus struct {
	InSync           bool      `json:"in_sync"`
	State            string    `json:"state"`
	KernelPolicies   int       `json:"kernel_policies"`
	KernelStates     int       `json:"kernel_states"`
	MirroredPolicies int       `json:"mirrored_policies"`
	Tuples           [2]int    `json:"tuples"` // IPv4, IPv6
	Syncs            uint64    `json:"syncs"`
	Resyncs          uint64    `json:"resyncs"`
	Verified         uint64    `json:"verified"`     // dumps that agreed with the copy
	Divergences      uint64    `json:"divergences"`  // dumps that did not (then: resync)
	LeaseLapses      uint64    `json:"lease_lapses"` // the lease ran out under us
	LastSync         time.Time `json:"last_sync"`
	LastSyncDuration string    `json:"last_sync_duration"`
	LastError        string    `json:"last_error,omitempty"`
}

// Mirror keeps a Datapath's tables equal to a Source. Events update an
// in-memory copy; after Debounce the copy is compiled and swapped in
// whole.
//
// A lost event (socket overrun) closes the fast path at once. The mirror
// then drops the overrun socket with whatever it still holds, subscribes
// anew, dumps, and applies the new socket's events on top of the dump.
// Some of those predate the dump, so the copy is only right once every
// event announced before the dump ended has been applied: a marker queued
// on the socket after the dump says when. A second dump is then compared
// with the copy entry for entry (keys changed meanwhile excepted), and only
// when they agree does the fast path open again. A disagreement starts
// over.
type Mirror struct {
	DP       *Datapath
	Src      Source
	Debounce time.Duration // default 20ms
	Lease    time.Duration // 0: no lease (tests)
	Log      *slog.Logger
	// Tier, when set, is the hardware tier (internal/flower): it gets
	// every published snapshot, and is closed (rules removed) whenever
	// the fast path closes.
	Tier HardwareTier
	// PathMTU looks up the route under an SA (nil: the source's PathMTU
	// when it has one, as KernelSource does for its namespace, else
	// HostPathMTU, the calling thread's namespace). Every publish looks all of them up,
	// and a tick re-checks them (routeMTUChanged), since a learnt PMTU
	// exception is announced by no event.
	PathMTU PathMTUFunc
	// Quirks says, per offload device (ifindex), how it departs from the
	// kernel's XFRM (an exact-match driver: subnet selectors' packets go to
	// the kernel). Set before Run; the driver-quirks table fills it.
	Quirks map[int]DeviceQuirks

	mu      sync.Mutex // guards status and byIndex
	status  MirrorStatus
	byIndex map[uint32]xfrm.Policy // what the tables were last built from

	copy   mirrorCopy
	watch  *xfrm.Watch
	unsub  context.CancelFunc
	state  string
	seq    uint32        // last marker sent
	verify *verification // while StateVerifying
	// routeMTU is what the tables were last compiled with; mtuNext is
	// where the next re-check resumes.
	routeMTU   map[Endpoints]int
	routeState map[Endpoints]*xfrm.State // an SA of each route, for the re-check
	mtuNext    int
	// announced are the device-miss policies already logged
	// (announceDeviceMisses), so that each is announced once.
	announced map[string]bool
}

// Status returns a copy of the mirror's status.
func (m *Mirror) Status() MirrorStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status
}

// Policy returns the mirrored policy with the kernel index idx.
func (m *Mirror) Policy(idx uint32) (xfrm.Policy, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.byIndex[idx]
	return p, ok
}

func (m *Mirror) setStatus(f func(*MirrorStatus)) {
	m.mu.Lock()
	f(&m.status)
	m.mu.Unlock()
}

// close shuts the fast path (everything to the kernel) and says why. The
// status changes first, as publish opens the program first: a reader may
// see "closed" while the program is still or already open, never "in
// sync" while it is closed.
func (m *Mirror) close(state string, err error) {
	m.state = state
	m.setStatus(func(s *MirrorStatus) {
		s.InSync, s.State = false, state
		if err != nil {
			s.LastError = err.Error()
		}
	})
	m.DP.SetReady(false)
	if m.Tier != nil {
		m.Tier.Close() // returns once the hardware rules are gone
	}
}

const (
	retryMin = 100 * time.Millisecond
	retryMax = 5 * time.Second
)

// Run mirrors until ctx ends. It returns an error only when the source
// fails for good; the fast path is then closed (everything to the kernel).
func (m *Mirror) Run(ctx context.Context) error {
	if m.Debounce == 0 {
		m.Debounce = 20 * time.Millisecond
	}
	if m.Log == nil {
		m.Log = slog.Default()
	}
	m.unsub = func() {}
	defer func() { m.unsub() }()
	var (
		retry, debounce <-chan time.Time
		backoff         = retryMin
	)
	failed := func(what string, err error) {
		m.Log.Error(what+"; the fast path stays closed, retrying", "err", err, "in", backoff)
		m.close(StateClosed, err)
		retry = time.After(backoff)
		backoff = min(2*backoff, retryMax)
	}
	resync := func() {
		debounce, retry = nil, nil // this attempt supersedes a pending one
		if err := m.resync(ctx); err != nil {
			failed("resynchronising with the kernel", err)
		}
	}
	resync()
	var leaseTick <-chan time.Time
	if m.Lease > 0 {
		t := time.NewTicker(m.Lease / 4)
		defer t.Stop()
		leaseTick = t.C
		m.DP.RenewLease(m.Lease)
	}
	mtuTick := time.NewTicker(routeMTUCheck)
	defer mtuTick.Stop()
	for {
		var events <-chan xfrm.Event
		if m.watch != nil {
			events = m.watch.Events
		}
		select {
		case <-ctx.Done():
			return nil
		case <-retry:
			resync()
		case <-leaseTick:
			if err := m.renewLease(); err != nil {
				failed("catching up after the lease ran out", err)
			}
		case <-mtuTick.C:
			if m.state == StateInSync && debounce == nil && m.routeMTUChanged() {
				debounce = time.After(0)
			}
		case ev, ok := <-events:
			if !ok {
				m.watch = nil
				continue
			}
			switch ev.Kind {
			case xfrm.MonitorFailed:
				m.close(StateClosed, ev.Err)
				return errors.Join(errors.New("XFRM monitor failed; the fast path is closed"), ev.Err)
			case xfrm.Resync:
				// Events were lost: the maps may be wrong. Close now,
				// reopen once a fresh copy is proven.
				m.close(StateCatchingUp, nil)
				m.setStatus(func(s *MirrorStatus) { s.Resyncs++ })
				m.Log.Warn("XFRM events lost; the fast path is closed while resynchronising", "err", ev.Err)
				resync()
			case xfrm.Marker:
				if ev.Seq != m.seq {
					continue // from a round that was abandoned
				}
				if err := m.markerArrived(); err != nil {
					failed("verifying the mirror", err)
				} else if m.state == StateInSync {
					backoff = retryMin
				}
			default:
				m.applyEvent(ev) // an EventTier withdraws what it lost
				if m.verify != nil {
					m.verify.touch(ev)
				}
				if m.state == StateInSync && debounce == nil {
					debounce = time.After(m.Debounce)
				}
			}
		case <-debounce:
			debounce = nil
			if m.state != StateInSync {
				continue
			}
			if err := m.publish(); err != nil {
				failed("updating the fast path", err)
			}
		}
	}
}

// resync starts over: a new subscription, a dump, and a marker behind it.
// The fast path stays closed until the marker's round proves the copy.
func (m *Mirror) resync(ctx context.Context) error {
	m.close(StateCatchingUp, nil)
	m.unsub() // the old socket, and every event still queued in it, goes
	m.watch, m.verify = nil, nil
	wctx, cancel := context.WithCancel(ctx)
	m.unsub = cancel
	w, err := m.Src.Watch(wctx)
	if err != nil {
		return err
	}
	snap, err := m.Src.Dump()
	if err != nil {
		return err
	}
	m.copy.load(snap)
	if w == nil { // a static source: the dump is the truth
		return m.open()
	}
	m.watch = w
	return m.mark(StateCatchingUp)
}

// mark queues the next marker behind whatever the kernel announced so far.
func (m *Mirror) mark(state string) error {
	m.seq++
	m.state = state
	m.setStatus(func(s *MirrorStatus) { s.State = state })
	return m.watch.Mark(m.seq)
}

// markerArrived moves a closed mirror on: every event announced before the
// marker was sent has now been applied to the copy.
func (m *Mirror) markerArrived() error {
	switch m.state {
	case StateCatchingUp:
		// The copy is the kernel's state as of the marker. Prove it
		// with a second dump, compared once the events announced
		// before that dump ended are applied too.
		snap, err := m.Src.Dump()
		if err != nil {
			return err
		}
		m.verify = newVerification(snap)
		return m.mark(StateVerifying)
	case StateVerifying:
		v := m.verify
		m.verify = nil
		if v.inconclusive {
			// A flush or a default change came in between: dump again.
			m.state = StateCatchingUp
			return m.markerArrived()
		}
		if diff := v.compare(&m.copy); diff != "" {
			m.setStatus(func(s *MirrorStatus) { s.Divergences++ })
			return fmt.Errorf("the mirror differs from the kernel's dump (%s); starting over", diff)
		}
		m.setStatus(func(s *MirrorStatus) { s.Verified++ })
		return m.open()
	}
	return nil
}

// open publishes the copy and opens the fast path.
func (m *Mirror) open() error {
	m.state = StateInSync
	return m.publish()
}

// renewLease extends the lease; if it ran out meanwhile (the daemon was
// stopped or starved past it), events may still wait in the socket and the
// tables are stale: stay closed until a marker proves them caught up.
func (m *Mirror) renewLease() error {
	expired, err := m.DP.LeaseExpired()
	if err != nil {
		m.Log.Error("reading the fast path lease", "err", err)
	}
	var markErr error
	if expired && m.state == StateInSync && m.watch != nil {
		m.Log.Warn("the fast path lease ran out (was the daemon stopped?); it stays closed until the queued XFRM events are applied and verified")
		m.close(StateCatchingUp, nil)
		m.setStatus(func(s *MirrorStatus) { s.LeaseLapses++ })
		markErr = m.mark(StateCatchingUp)
	}
	if err := m.DP.RenewLease(m.Lease); err != nil {
		m.Log.Error("renewing the fast path lease", "err", err)
	}
	return markErr
}

// HardwareTier is a forwarding tier beside XDP fed by the mirror (the
// flower tier, internal/flower).
type HardwareTier interface {
	// Update hands over a freshly published snapshot.
	Update(Snapshot)
	// Close removes everything that depends on the mirror, before it
	// returns: the fast path closed.
	Close()
}
