package api

import (
	"net"
	"net/http"
	"net/netip"
	"time"

	"golang.org/x/net/netutil"
)

// Limits bound what clients can hold on the API and metrics servers: a
// client that opens connections and sends nothing, or keeps them idle,
// must neither keep a descriptor for ever nor starve the daemon of them
// (~21,000 idle keep-alive connections once used them all).
type Limits struct {
	// MaxConns is the most connections a server holds at once; more wait
	// in the kernel's accept queue until one closes.
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

// limitConns caps the connections l hands out at once.
func limitConns(l net.Listener) net.Listener { return netutil.LimitListener(l, limits.MaxConns) }

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
