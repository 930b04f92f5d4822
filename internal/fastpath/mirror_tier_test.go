package fastpath

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"sluice/internal/kernel"
)

// chanSource is a Source whose events the test sends.
type chanSource struct {
	mu   sync.Mutex
	snap Snapshot
	ch   chan kernel.XFRMEvent
}

func (c *chanSource) Dump() (Snapshot, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snap, nil
}

func (c *chanSource) Watch(context.Context) (<-chan kernel.XFRMEvent, error) { return c.ch, nil }

// recordingTier records what the mirror tells the hardware tier.
type recordingTier struct {
	mu    sync.Mutex
	calls []string // "update N states" or "close"
}

func (r *recordingTier) Update(s Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "update "+string(rune('0'+len(s.States)))+" states")
}

func (r *recordingTier) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "close")
}

func (r *recordingTier) wait(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		got := append([]string(nil), r.calls...)
		r.mu.Unlock()
		if len(got) >= len(want) {
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("calls %q, want %q", got, want)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls %q, want %q", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The hardware tier follows the mirror: each publish hands it the
// snapshot (an SA deletion reaches it like any change), and lost events
// close it — rules removed — before the mirror resynchronises.
func TestMirrorFeedsAndClosesTheHardwareTier(t *testing.T) {
	requireRoot(t)
	dp, err := Load(LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	sa := kernel.State{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"), Proto: 50, SPI: 7, Mode: 1}
	src := &chanSource{ch: make(chan kernel.XFRMEvent, 4), snap: Snapshot{States: []kernel.State{sa}}}
	tier := &recordingTier{}
	m := &Mirror{DP: dp, Src: src, Tier: tier, Debounce: time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	tier.wait(t, "update 1 states")
	src.ch <- kernel.XFRMEvent{Kind: kernel.StateDel, State: &sa}
	tier.wait(t, "update 1 states", "update 0 states")
	src.ch <- kernel.XFRMEvent{Kind: kernel.Resync, Err: errors.New("overrun")}
	tier.wait(t, "update 1 states", "update 0 states", "close", "update 1 states")
}
