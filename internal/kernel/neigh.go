// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// WatchNeighRoutes signals on the returned channel whenever a neighbour or
// a route changes (RTM_NEWNEIGH/DELNEIGH/NEWROUTE/DELROUTE) or when changes
// may have been missed (socket overrun): the next-hop cache then resolves
// again. Signals coalesce (capacity 1), so a storm costs one recompute.
// The channel is closed when ctx ends.
func WatchNeighRoutes(ctx context.Context) (<-chan struct{}, error) {
	return WatchNeighRoutesAt(ctx, netns.None())
}

// WatchNeighRoutesAt is WatchNeighRoutes for the namespace ns.
func WatchNeighRoutesAt(ctx context.Context, ns netns.NsHandle) (<-chan struct{}, error) {
	return watchNeighRoutes(ctx, ns, neighWatchOpts{})
}

// neighWatchOpts lets tests provoke and observe an overrun.
type neighWatchOpts struct {
	rcvbuf        int    // socket receive buffer; 0: the system default
	onResubscribe func() // called after a subscription was renewed
	hold          func() // called before each read: a test's slow consumer
}

func watchNeighRoutes(ctx context.Context, ns netns.NsHandle, o neighWatchOpts) (<-chan struct{}, error) {
	out := make(chan struct{}, 1)
	// vishvananda's readers call the error callback (hence signal) even
	// while shutting down, after out may be closed: guard it.
	var mu sync.Mutex
	closed := false
	signal := func() {
		mu.Lock()
		defer mu.Unlock()
		if !closed {
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}
	done, nch, rch, ruch, err := neighSubscribe(ns, o.rcvbuf, signal)
	if err != nil {
		return nil, err
	}
	go func() {
		defer func() {
			mu.Lock()
			closed = true
			close(out)
			mu.Unlock()
		}()
		for {
			if o.hold != nil {
				o.hold()
			}
			var ok bool
			select {
			case <-ctx.Done():
				close(done)
				return
			case _, ok = <-nch:
			case _, ok = <-rch:
			case _, ok = <-ruch:
			}
			signal()
			if ok {
				continue
			}
			// vishvananda closes a subscription on any receive error
			// (ENOBUFS included): changes may be lost, so we signalled,
			// and now subscribe afresh.
			close(done)
			for {
				if done, nch, rch, ruch, err = neighSubscribe(ns, o.rcvbuf, signal); err == nil {
					if o.onResubscribe != nil {
						o.onResubscribe()
					}
					break
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		}
	}()
	return out, nil
}

// neighSubscribe opens the neighbour, route and policy-rule subscriptions;
// closing done ends all three. Old channels are drained until closed so
// that vishvananda's reader goroutines never block on a send nobody reads.
func neighSubscribe(ns netns.NsHandle, rcvbuf int, onErr func()) (chan struct{}, chan netlink.NeighUpdate, chan netlink.RouteUpdate, chan struct{}, error) {
	done := make(chan struct{})
	nch := make(chan netlink.NeighUpdate, 16)
	rch := make(chan netlink.RouteUpdate, 16)
	var nsp *netns.NsHandle
	if ns.IsOpen() {
		nsp = &ns
	}
	cb := func(error) { onErr() }
	err := netlink.NeighSubscribeWithOptions(nch, done, netlink.NeighSubscribeOptions{
		Namespace: nsp, ErrorCallback: cb, ReceiveBufferSize: rcvbuf, ReceiveBufferForceSize: rcvbuf > 0})
	if err == nil {
		err = netlink.RouteSubscribeWithOptions(rch, done, netlink.RouteSubscribeOptions{
			Namespace: nsp, ErrorCallback: cb, ReceiveBufferSize: rcvbuf, ReceiveBufferForceSize: rcvbuf > 0})
		if err != nil {
			close(done)
		}
	}
	var ruch chan struct{}
	if err == nil {
		if ruch, err = ruleSubscribe(ns, rcvbuf, onErr, done); err != nil {
			close(done)
		}
	}
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("watch neighbours, routes and rules: %w", err)
	}
	go func() {
		<-done
		for range nch {
		}
	}()
	go func() {
		<-done
		for range rch {
		}
	}()
	return done, nch, rch, ruch, nil
}

// ruleSubscribe signals on the returned channel (coalesced) when an IPv4 or
// IPv6 policy rule is added or removed: vishvananda/netlink has no rule
// subscription. The channel closes when done closes or a receive fails
// (onErr is called then: changes may have been lost).
func ruleSubscribe(ns netns.NsHandle, rcvbuf int, onErr func(), done <-chan struct{}) (chan struct{}, error) {
	cur := netns.None()
	s, err := nl.SubscribeAt(ns, cur, unix.NETLINK_ROUTE, unix.RTNLGRP_IPV4_RULE, unix.RTNLGRP_IPV6_RULE)
	if err != nil {
		return nil, err
	}
	if rcvbuf > 0 {
		if err := s.SetReceiveBufferSize(rcvbuf, true); err != nil {
			s.Close()
			return nil, err
		}
	}
	ch := make(chan struct{}, 1)
	go func() {
		<-done
		s.Close()
	}()
	go func() {
		defer close(ch)
		for {
			if _, _, err := s.Receive(); err != nil {
				select {
				case <-done:
				default:
					onErr()
				}
				return
			}
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	return ch, nil
}

// ResolveNextHop finds where the kernel would send a packet for ip: the
// output interface and the next hop's MAC address (the gateway's, or ip's
// own when on-link), as an XDP program needs them to forward by itself.
func ResolveNextHop(ip netip.Addr) (ifindex int, mac net.HardwareAddr, err error) {
	return ResolveNextHopAt(netns.None(), ip)
}

// usableNUD are neighbour states with a valid link-layer address. STALE is
// included: the address is still right until the kernel learns otherwise.
const usableNUD = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT

// ResolveNextHopAt is ResolveNextHop in the namespace ns.
func ResolveNextHopAt(ns netns.NsHandle, ip netip.Addr) (ifindex int, mac net.HardwareAddr, err error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return 0, nil, fmt.Errorf("resolve next hop for %s: %w", ip, err)
	}
	defer h.Close()
	routes, err := h.RouteGet(ip.AsSlice())
	if err != nil || len(routes) == 0 {
		return 0, nil, &NoRouteError{Addr: ip, Err: err}
	}
	r := routes[0]
	if r.Type == unix.RTN_LOCAL {
		return 0, nil, fmt.Errorf("%s is an address of this host, not a next hop", ip)
	}
	nh := ip.Unmap()
	if a, ok := netip.AddrFromSlice(r.Gw); ok {
		nh = a.Unmap()
	} else if v, ok := r.Via.(*netlink.Via); ok {
		if a, ok := netip.AddrFromSlice(v.Addr); ok {
			nh = a.Unmap()
		}
	}
	dev := fmt.Sprintf("ifindex %d", r.LinkIndex)
	if l, err := h.LinkByIndex(r.LinkIndex); err == nil {
		dev = l.Attrs().Name
	}
	family := netlink.FAMILY_V4
	if nh.Is6() {
		family = netlink.FAMILY_V6
	}
	neighs, err := h.NeighList(r.LinkIndex, family)
	if err != nil {
		return 0, nil, fmt.Errorf("neighbours of %s: %w", dev, err)
	}
	for _, n := range neighs {
		a, _ := netip.AddrFromSlice(n.IP)
		if a.Unmap() == nh && n.State&usableNUD != 0 && len(n.HardwareAddr) == 6 {
			return r.LinkIndex, n.HardwareAddr, nil
		}
	}
	return 0, nil, &NoNeighbourError{NextHop: nh, Dev: dev}
}

// NoRouteError: the kernel has no route to Addr (Err is what RTM_GETROUTE
// said; nil when it answered with no route).
type NoRouteError struct {
	Addr netip.Addr
	Err  error
}

func (e *NoRouteError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("no route to %s", e.Addr)
	}
	return fmt.Sprintf("no route to %s (%v)", e.Addr, e.Err)
}
func (e *NoRouteError) Unwrap() error { return e.Err }

// NoNeighbourError: the route leads to NextHop on Dev, but the neighbour
// table has no usable link-layer address for it.
type NoNeighbourError struct {
	NextHop netip.Addr
	Dev     string
}

func (e *NoNeighbourError) Error() string {
	return fmt.Sprintf("no neighbour entry for %s on %s", e.NextHop, e.Dev)
}
