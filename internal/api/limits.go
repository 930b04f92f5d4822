// SPDX-License-Identifier: Apache-2.0

package api

import (
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Limits bound what clients can hold on the API and metrics servers: a
// client that opens connections and sends nothing, or keeps them idle,
// must neither keep a descriptor for ever nor starve the daemon of them
// (~21,000 idle keep-alive connections once used them all).
type Limits struct {
	// MaxConns is the most connections a server holds at once. At the
	// cap the connection idle longest is closed for a new one; when none
	// is idle, new ones wait in the kernel's accept queue.
	MaxConns int
	// ReadHeader bounds the wait for a request's headers (a new
	// connection that sends nothing is closed after it).
	ReadHeader time.Duration
	// Read bounds reading a whole request, Write writing a whole response
	// (a slow reader cannot hold a scrape of many policies open).
	Read, Write time.Duration
	// Idle closes a keep-alive connection with no new request.
	Idle time.Duration
}

// DefaultLimits are far above what the CLI and a Prometheus scraper need.
var DefaultLimits = Limits{MaxConns: 64, ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 30 * time.Second, Idle: 30 * time.Second}

// limits is what Serve and ServeMetrics use; tests shorten it.
var limits = DefaultLimits

// newServer is an http.Server for h with the timeouts of limits.
func newServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: limits.ReadHeader, ReadTimeout: limits.Read,
		WriteTimeout: limits.Write, IdleTimeout: limits.Idle}
}

// serveLimited serves srv on l holding at most limits.MaxConns
// connections. When they are all open, it closes the one idle longest (a
// keep-alive connection between requests) before it accepts the next:
// with a plain cap (netutil.LimitListener), 70 keep-alive clients that
// each repeat a request every 20 s held all 64 slots, and fresh scrapes
// of /metrics timed out for as long as they ran. Only when every slot is
// busy with a request does a new connection wait in the kernel's accept
// queue, and a request is bounded by the Read/Write limits.
func serveLimited(srv *http.Server, l net.Listener) error {
	cl := &capListener{Listener: l, max: limits.MaxConns, conns: map[net.Conn]*connState{}}
	cl.cond = sync.NewCond(&cl.mu)
	srv.ConnState = cl.track
	return srv.Serve(cl)
}

// capListener is serveLimited's listener; http.Server tells it each
// connection's state through track.
type capListener struct {
	net.Listener
	max int

	mu     sync.Mutex // guards the fields below
	cond   *sync.Cond // signalled when a connection closes or goes idle
	conns  map[net.Conn]*connState
	closed bool
}

type connState struct {
	idle  bool // a keep-alive connection waiting for its next request
	since time.Time
	peer  int // the client's uid on the unix socket (SO_PEERCRED); -1 on TCP
}

// Accept makes room (closing the longest idle connection, or waiting for
// one to close) before it accepts. On the unix socket one user other than
// root and the daemon's own holds at most half the connections: a member
// of the socket's group who keeps connections busy (headers sent slowly,
// each for up to the ReadHeader limit) cannot take every slot from root's
// 'sluice show'. A connection over that share replaces the user's longest
// idle one, or is closed at once.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		for len(l.conns) >= l.max && !l.closed {
			if c := l.longestIdle(-1); c != nil {
				delete(l.conns, c)
				c.Close()
				break
			}
			l.cond.Wait()
		}
		l.mu.Unlock()
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := peerUID(c)
		l.mu.Lock()
		if peer > 0 && peer != os.Geteuid() && l.countOf(peer) >= l.max/2 {
			victim := l.longestIdle(peer)
			if victim == nil {
				l.mu.Unlock()
				c.Close()
				continue
			}
			delete(l.conns, victim)
			victim.Close()
		}
		l.conns[c] = &connState{since: time.Now(), peer: peer}
		l.mu.Unlock()
		return c, nil
	}
}

// peerUID is the uid of the process at the other end of a unix socket
// connection, or -1.
func peerUID(c net.Conn) int {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return -1
	}
	uid := -1
	rc.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			uid = int(cred.Uid)
		}
	})
	return uid
}

func (l *capListener) countOf(peer int) int {
	n := 0
	for _, s := range l.conns {
		if s.peer == peer {
			n++
		}
	}
	return n
}

// longestIdle is the connection idle longest (of peer, unless -1).
func (l *capListener) longestIdle(peer int) net.Conn {
	var victim net.Conn
	var since time.Time
	for c, s := range l.conns {
		if s.idle && (peer < 0 || s.peer == peer) && (victim == nil || s.since.Before(since)) {
			victim, since = c, s.since
		}
	}
	return victim
}

// track is the server's ConnState hook.
func (l *capListener) track(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.conns[c]
	switch st {
	case http.StateIdle, http.StateActive:
		if ok {
			s.idle, s.since = st == http.StateIdle, time.Now()
			if s.idle {
				l.cond.Broadcast() // Accept may wait for one to close
			}
		}
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
		l.cond.Broadcast()
	}
}

// Close stops Accept waiting for room.
func (l *capListener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// AllInterfaces reports whether a listen address (host:port) binds every
// interface: an empty host, 0.0.0.0 or ::.
func AllInterfaces(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsUnspecified()
}
