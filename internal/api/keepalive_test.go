package api

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// keepAliveClients runs n HTTP clients, each on its own keep-alive
// connection, repeating a GET of url every period until ctx ends.
func keepAliveClients(ctx context.Context, n int, dial func(context.Context, string, string) (net.Conn, error), url string, period time.Duration) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
				if resp, err := c.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				select {
				case <-ctx.Done():
				case <-time.After(period):
				}
			}
		}()
	}
	return &wg
}

// 70 keep-alive clients that repeat a request more often than the idle
// timeout held all 64 slots, and a fresh client (a scrape, `show gateway`)
// timed out for as long as they ran. At the cap the server now closes the
// connection idle longest, so a fresh request is answered.
func TestKeepAliveClientsCannotStarveTheServers(t *testing.T) {
	if limits.MaxConns != 64 {
		t.Fatalf("the test is sized for the 64-connection cap, not %d", limits.MaxConns)
	}
	const clients, period = 70, 200 * time.Millisecond // the report's 20 s, scaled against the 30 s idle timeout
	fresh := func(t *testing.T, dial func(context.Context, string, string) (net.Conn, error), url string) {
		t.Helper()
		c := &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}, Timeout: 3 * time.Second}
		for i := range 5 {
			resp, err := c.Get(url)
			if err != nil {
				t.Fatalf("fresh request %d behind %d keep-alive clients: %v", i, clients, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("fresh request %d: %s", i, resp.Status)
			}
		}
	}
	wait := func(ctx context.Context, cancel context.CancelFunc, wg *sync.WaitGroup) {
		time.Sleep(time.Second) // let them take every slot
		t.Cleanup(func() { cancel(); wg.Wait() })
	}

	t.Run("API socket", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sluice.sock")
		serve(t, path)
		dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}
		ctx, cancel := context.WithCancel(context.Background())
		wg := keepAliveClients(ctx, clients, dial, "http://sluice/"+Version+"/gateway", period)
		wait(ctx, cancel, wg)
		fresh(t, dial, "http://sluice/"+Version+"/gateway")
	})

	t.Run("metrics", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { ServeMetrics(sctx, l, MetricsHandler(fakeProvider{policies: 3}, 10, Build{})); close(done) }()
		t.Cleanup(func() { stop(); <-done })
		dial := (&net.Dialer{}).DialContext
		url := "http://" + l.Addr().String() + "/metrics"
		ctx, cancel := context.WithCancel(context.Background())
		wg := keepAliveClients(ctx, clients, dial, url, period)
		wait(ctx, cancel, wg)
		fresh(t, dial, url)
	})
}
