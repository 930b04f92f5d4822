package fastpath

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"sluice/internal/kernel"
)

// Source is where the mirror reads XFRM state from.
type Source interface {
	// Dump returns the whole current state.
	Dump() (Snapshot, error)
	// Watch returns change events; a nil channel means the source never
	// changes (static lab policies). Start it before Dump so that no
	// change falls between the two.
	Watch(ctx context.Context) (<-chan kernel.XFRMEvent, error)
}

// KernelSource reads the kernel's XFRM database (of one namespace).
type KernelSource struct{ X *kernel.XFRM }

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
	_, fwd, _, err := k.X.PolicyDefaults()
	if err != nil {
		// Kernels before 5.16 have no policy defaults: accept is all they do.
		fwd = kernel.ActionAllow
	}
	return Snapshot{Policies: pols, States: states, FwdDefaultBlock: fwd == kernel.ActionBlock}, nil
}

// Watch implements Source.
func (k KernelSource) Watch(ctx context.Context) (<-chan kernel.XFRMEvent, error) {
	return k.X.Monitor(ctx)
}

// StaticSource is a fixed snapshot (lab configs, offline explain).
type StaticSource struct{ Snap Snapshot }

// Dump implements Source.
func (s StaticSource) Dump() (Snapshot, error) { return s.Snap, nil }

// Watch implements Source.
func (StaticSource) Watch(context.Context) (<-chan kernel.XFRMEvent, error) { return nil, nil }

// MirrorStatus is what `sluice show gateway` reports about the mirror.
type MirrorStatus struct {
	InSync           bool      `json:"in_sync"`
	KernelPolicies   int       `json:"kernel_policies"`
	KernelStates     int       `json:"kernel_states"`
	MirroredPolicies int       `json:"mirrored_policies"`
	Tuples           [2]int    `json:"tuples"` // IPv4, IPv6
	Syncs            uint64    `json:"syncs"`
	Resyncs          uint64    `json:"resyncs"`
	LastSync         time.Time `json:"last_sync"`
	LastSyncDuration string    `json:"last_sync_duration"`
	LastError        string    `json:"last_error,omitempty"`
}

type stateKey struct {
	dst   netip.Addr
	spi   uint32
	proto uint8
}

// Mirror keeps a Datapath's tables equal to a Source. Events update an
// in-memory copy; after a quiet Debounce the copy is compiled and swapped
// in whole. A lost event (socket overrun) closes the fast path until a
// fresh dump has been applied.
type Mirror struct {
	DP       *Datapath
	Src      Source
	Debounce time.Duration // default 20ms
	Lease    time.Duration // 0: no lease (tests)
	Log      *slog.Logger
	// Tier, when set, is the hardware tier (internal/flower): it gets
	// every published snapshot, and is closed (rules removed) whenever
	// the fast path closes for lost or failed sync.
	Tier HardwareTier

	mu       sync.Mutex // guards status and byIndex
	status   MirrorStatus
	byIndex  map[uint32]kernel.Policy // what the tables were last built from
	policies map[uint32]kernel.Policy
	states   map[stateKey]kernel.State
	fwdBlock bool
}

// Status returns a copy of the mirror's status.
func (m *Mirror) Status() MirrorStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status
}

// Policy returns the mirrored policy with the kernel index idx.
func (m *Mirror) Policy(idx uint32) (kernel.Policy, bool) {
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

// Run mirrors until ctx ends. It returns an error only when the source
// fails for good; the fast path is then closed (everything to the kernel).
func (m *Mirror) Run(ctx context.Context) error {
	if m.Debounce == 0 {
		m.Debounce = 20 * time.Millisecond
	}
	if m.Log == nil {
		m.Log = slog.Default()
	}
	events, err := m.Src.Watch(ctx)
	if err != nil {
		m.closeFastPath()
		return err
	}
	if err := m.resync(); err != nil {
		m.Log.Error("initial sync failed; the fast path stays closed", "err", err)
	}
	var leaseTick <-chan time.Time
	if m.Lease > 0 {
		t := time.NewTicker(m.Lease / 4)
		defer t.Stop()
		leaseTick = t.C
		m.DP.RenewLease(m.Lease)
	}
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-leaseTick:
			if err := m.DP.RenewLease(m.Lease); err != nil {
				m.Log.Error("renewing the fast path lease", "err", err)
			}
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			switch ev.Kind {
			case kernel.MonitorFailed:
				m.closeFastPath()
				m.setStatus(func(s *MirrorStatus) { s.InSync = false; s.LastError = ev.Err.Error() })
				return errors.Join(errors.New("XFRM monitor failed; the fast path is closed"), ev.Err)
			case kernel.Resync:
				// Events were lost: the maps may be wrong. Close now,
				// reopen after a fresh dump.
				m.closeFastPath()
				m.setStatus(func(s *MirrorStatus) { s.InSync = false; s.Resyncs++ })
				m.Log.Warn("XFRM events lost; resynchronising", "err", ev.Err)
				if err := m.resync(); err != nil {
					m.Log.Error("resync failed; the fast path stays closed", "err", err)
				}
				debounce = nil
			default:
				m.applyEvent(ev)
				if debounce == nil {
					debounce = time.After(m.Debounce)
				}
			}
		case <-debounce:
			debounce = nil
			if err := m.publish(); err != nil {
				m.Log.Error("updating the fast path; it stays closed", "err", err)
			}
		}
	}
}

func (m *Mirror) resync() error {
	snap, err := m.Src.Dump()
	if err != nil {
		m.closeFastPath()
		m.setStatus(func(s *MirrorStatus) { s.InSync = false; s.LastError = err.Error() })
		return err
	}
	m.policies = make(map[uint32]kernel.Policy, len(snap.Policies))
	for _, p := range snap.Policies {
		m.policies[p.Index] = p
	}
	m.states = make(map[stateKey]kernel.State, len(snap.States))
	for _, s := range snap.States {
		m.states[keyOf(&s)] = s
	}
	m.fwdBlock = snap.FwdDefaultBlock
	return m.publish()
}

func keyOf(s *kernel.State) stateKey { return stateKey{dst: s.Dst, spi: s.SPI, proto: s.Proto} }

func (m *Mirror) applyEvent(ev kernel.XFRMEvent) {
	switch ev.Kind {
	case kernel.PolicyNew, kernel.PolicyUpd:
		m.policies[ev.Policy.Index] = *ev.Policy
	case kernel.PolicyDel:
		delete(m.policies, ev.Policy.Index)
	case kernel.PolicyExpire:
		if ev.Hard {
			delete(m.policies, ev.Policy.Index)
		}
	case kernel.PolicyFlush:
		sub := ev.Policy != nil && ev.Policy.Sub
		for i, p := range m.policies {
			if p.Sub == sub {
				delete(m.policies, i)
			}
		}
	case kernel.StateNew, kernel.StateUpd:
		m.states[keyOf(ev.State)] = *ev.State
	case kernel.StateDel:
		delete(m.states, keyOf(ev.State))
	case kernel.StateExpire:
		if ev.Hard {
			delete(m.states, keyOf(ev.State))
		}
	case kernel.StateFlush:
		for k := range m.states {
			if ev.State == nil || ev.State.Proto == 0 || k.proto == ev.State.Proto {
				delete(m.states, k)
			}
		}
	}
}

// publish compiles the in-memory copy and swaps it in.
func (m *Mirror) publish() error {
	start := time.Now()
	snap := Snapshot{FwdDefaultBlock: m.fwdBlock}
	snap.Policies = make([]kernel.Policy, 0, len(m.policies))
	for _, p := range m.policies {
		snap.Policies = append(snap.Policies, p)
	}
	snap.States = make([]kernel.State, 0, len(m.states))
	for _, s := range m.states {
		snap.States = append(snap.States, s)
	}
	tables, err := Compile(snap)
	if err == nil {
		err = m.DP.Apply(tables)
	}
	if err != nil {
		m.closeFastPath()
		m.setStatus(func(s *MirrorStatus) { s.InSync = false; s.LastError = err.Error() })
		return err
	}
	if err := m.DP.PruneCounters(func(i uint32) bool { _, ok := m.policies[i]; return ok }); err != nil {
		m.Log.Warn("pruning per-policy counters", "err", err)
	}
	if m.Tier != nil {
		m.Tier.Update(snap)
	}
	byIndex := make(map[uint32]kernel.Policy, len(m.policies))
	for i, p := range m.policies {
		byIndex[i] = p
	}
	m.setStatus(func(s *MirrorStatus) {
		m.byIndex = byIndex
		s.InSync = true
		s.KernelPolicies = len(snap.Policies)
		s.KernelStates = len(snap.States)
		s.MirroredPolicies = tables.Mirrored
		s.Tuples = [2]int{len(tables.Tuples[0]), len(tables.Tuples[1])}
		s.Syncs++
		s.LastSync = time.Now()
		s.LastSyncDuration = time.Since(start).String()
		s.LastError = ""
	})
	return nil
}

// HardwareTier is a forwarding tier beside XDP fed by the mirror (the
// flower tier, internal/flower).
type HardwareTier interface {
	// Update hands over a freshly published snapshot.
	Update(Snapshot)
	// Close removes everything that depends on the mirror, before it
	// returns: the mirror lost or failed its sync.
	Close()
}

// closeFastPath hands every packet to the kernel: XDP at once, and the
// hardware tier's rules removed before the mirror goes on.
func (m *Mirror) closeFastPath() {
	m.DP.SetReady(false)
	if m.Tier != nil {
		m.Tier.Close()
	}
}
