// SPDX-License-Identifier: Apache-2.0

package api

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"sluice/internal/testutil"
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

// slowClients is run by python3 as another user: it opens n connections
// to the socket, sends half a request on each (the server waits up to the
// header limit for the rest), says "ready" and holds them. A connection
// the server already closed (over the user's share) fails its send with
// EPIPE: expected, and not the client's failure.
const slowClients = `
import socket, sys, time
conns = []
for i in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(sys.argv[1])
        s.send(b"GET /v1/gateway HTTP/1.1\r\n")
    except OSError:
        pass
    conns.append(s)
print("ready", flush=True)
time.sleep(30)
`

// A member of the socket's group (here any user: mode 0666) who keeps 70
// connections busy sending headers slowly took all 64 slots, and root's
// 'sluice show gateway' waited behind them for the 5 s header limit. One
// user other than root now holds at most half the slots.
func TestOneUserCannotTakeEverySlot(t *testing.T) {
	testutil.RequireRoot(t, "the slow client runs as uid 65534")
	dir := trustedTemp(t, 0o755)
	path := filepath.Join(dir, "sluice.sock")
	l, err := Listen(path, SocketOptions{Mode: 0o666, UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, l)
	c := exec.Command("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--inh-caps=-all", "/usr/bin/python3", "-c", slowClients, path, "70")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the slow client as uid 65534 did not start: %q\n%s", line, stderr.String())
	}
	time.Sleep(200 * time.Millisecond) // the server accepts what it takes
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}, Timeout: 2 * time.Second}
	resp, err := hc.Get("http://sluice/" + Version + "/gateway")
	if err != nil {
		t.Fatalf("root's request behind 70 slow connections of uid 65534: %v", err)
	}
	resp.Body.Close()
}
