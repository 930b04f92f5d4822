// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"sluice/internal/fleet/kubetest"
)

// scaleWatcher stands in for one agent: the agent's own informers
// (newKubeSource, status stripped by its transform), on a connection of
// its own whose bytes are counted as they come off the socket (TLS and
// HTTP/2 framing included: what the API server sends it).
type scaleWatcher struct {
	src  *kubeSource
	wire atomic.Int64

	mu sync.Mutex
	// seen is when this agent's informer delivered each Host update,
	// by resourceVersion.
	seen map[string]time.Time
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func newScaleWatcher(s *kubetest.Server) (*scaleWatcher, error) {
	w := &scaleWatcher{seen: map[string]time.Time{}}
	cfg := s.Config("admin")
	// A Dial of its own also keeps client-go from sharing one cached
	// transport (one HTTP/2 connection) among all watchers: each agent
	// is a host of its own.
	var d net.Dialer
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &w.wire}, nil
	}
	src, err := newKubeSource(cfg, "sluice-system", 0, func() {})
	if err != nil {
		return nil, err
	}
	w.src = src
	_, err = src.hosts.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			now := time.Now()
			w.mu.Lock()
			w.seen[u.GetResourceVersion()] = now
			w.mu.Unlock()
		}
	}})
	return w, err
}

func (w *scaleWatcher) sawAt(rv string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.seen[rv]
	return t, ok
}

// startScaleWatchers starts count agents' informers, at most 8 listing
// at once, and returns when all have synced.
func startScaleWatchers(ctx context.Context, s *kubetest.Server, count int) ([]*scaleWatcher, error) {
	ws := make([]*scaleWatcher, count)
	for i := range ws {
		w, err := newScaleWatcher(s)
		if err != nil {
			return nil, err
		}
		ws[i] = w
	}
	var wg sync.WaitGroup
	var failed atomic.Int32
	sem := make(chan struct{}, 8)
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if !w.src.start(ctx) {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return nil, fmt.Errorf("%d of %d watchers did not sync", n, count)
	}
	return ws, nil
}

func wireBytes(ws []*scaleWatcher) int64 {
	var sum int64
	for _, w := range ws {
		sum += w.wire.Load()
	}
	return sum
}

// delivered waits until every watcher has seen resourceVersion rv and
// returns each one's delay after start.
func delivered(ws []*scaleWatcher, rv string, start time.Time, limit time.Duration) ([]time.Duration, error) {
	out := make([]time.Duration, len(ws))
	deadline := time.Now().Add(limit)
	for i := 0; i < len(ws); {
		if at, ok := ws[i].sawAt(rv); ok {
			out[i] = at.Sub(start)
			i++
			continue
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("watcher %d of %d has not seen resourceVersion %s after %v", i, len(ws), rv, limit)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return out, nil
}

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func sortedCopy(d []time.Duration) []time.Duration {
	c := slices.Clone(d)
	slices.Sort(c)
	return c
}
