// SPDX-License-Identifier: Apache-2.0

package api

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// countingListener records the most accepted connections open at once.
type countingListener struct {
	net.Listener
	mu        sync.Mutex
	open, max int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open++
	l.max = max(l.max, l.open)
	return &countedConn{Conn: c, l: l}, nil
}

func (l *countingListener) peak() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.mu.Lock(); c.l.open--; c.l.mu.Unlock() })
	return c.Conn.Close()
}

// Connections that send nothing, or idle after a request, cannot hold the
// API: the server holds at most MaxConns at once, closes silent and idle
// ones, and still answers a real client queued behind five times the cap
// of silent connections.
func TestIdleConnectionsCannotStarveTheAPI(t *testing.T) {
	old := limits
	limits = Limits{MaxConns: 8, ReadHeader: 300 * time.Millisecond, Read: time.Second, Write: time.Second, Idle: 300 * time.Millisecond}
	t.Cleanup(func() { limits = old })
	path := filepath.Join(t.TempDir(), "sluice.sock")
	l, err := Listen(path, SocketOptions{UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: l}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Serve(ctx, cl, Handler(fakeProvider{policies: 3})); close(done) }()
	t.Cleanup(func() { cancel(); <-done; l.Close() })

	// A keep-alive connection that made one request and then idles.
	ka, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ka.Close()
	if _, err := io.WriteString(ka, "GET /"+Version+"/gateway HTTP/1.1\r\nHost: sluice\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(ka), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("keep-alive request: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)

	var silent []net.Conn
	for range 5 * limits.MaxConns {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("dial %d: %v", len(silent), err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	s, err := NewClient(path).Gateway()
	if err != nil || !s.Mirror.InSync {
		t.Fatalf("the API did not answer behind %d silent connections: %v", len(silent), err)
	}
	if p := cl.peak(); p > limits.MaxConns {
		t.Errorf("the server held %d connections at once, cap %d", p, limits.MaxConns)
	}
	for i, c := range append(silent, ka) {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("connection %d (of %d silent and 1 idle keep-alive) was not closed by the server: %v", i, len(silent), err)
		}
	}
}

func TestAllInterfaces(t *testing.T) {
	for addr, want := range map[string]bool{":9108": true, "0.0.0.0:9108": true, "[::]:9108": true,
		"127.0.0.1:9108": false, "[::1]:9108": false, "192.0.2.7:9108": false, "localhost:9108": false} {
		if got := AllInterfaces(addr); got != want {
			t.Errorf("AllInterfaces(%q) = %v, want %v", addr, got, want)
		}
	}
}
