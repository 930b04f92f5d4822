// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"sluice/internal/kernel/xfrm"

	"sluice/internal/testutil"
)

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
// snapshot (an SA deletion reaches it like any change), and every close of
// the fast path (lost events, a failed sync, a divergence) closes it —
// rules removed — before the mirror goes on.
func TestMirrorFeedsAndClosesTheHardwareTier(t *testing.T) {
	testutil.RequireRoot(t, "loads BPF programs and creates network namespaces")
	dp, err := Load(LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	sa := xfrm.State{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"), Proto: xfrm.ProtoESP, SPI: 7, Mode: xfrm.ModeTunnel}
	tier := &recordingTier{}
	m := &Mirror{DP: dp, Tier: tier, Log: slog.Default()}
	m.copy.load(Snapshot{States: []xfrm.State{sa}})
	if err := m.open(); err != nil {
		t.Fatal(err)
	}
	m.copy.load(Snapshot{})
	if err := m.open(); err != nil {
		t.Fatal(err)
	}
	m.close(StateCatchingUp, errors.New("overrun"))
	tier.wait(t, "update 1 states", "update 0 states", "close")
}
