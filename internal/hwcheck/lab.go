// SPDX-License-Identifier: Apache-2.0

package hwcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netns"

	"sluice/internal/kernel"
	"sluice/internal/wire"
)

// The addresses of the lab, in documentation and private ranges: the
// ports sit in namespaces of their own, so nothing of the host's can
// clash with them.
var (
	linkA  = netip.MustParseAddr("192.0.2.1") // the port under test
	linkB  = netip.MustParseAddr("192.0.2.2") // its peer
	innerA = netip.MustParseAddr("10.71.0.1") // behind the port (its lo)
	innerB = netip.MustParseAddr("10.72.0.1") // behind the peer
	netA   = netip.MustParsePrefix("10.71.0.0/16")
	netB   = netip.MustParsePrefix("10.72.0.0/16")
)

// carrierWait is how long a port may take to come up after the move
// (a ConnectX negotiates for a few seconds).
const carrierWait = 30 * time.Second

// lab is the two ports, each in a namespace of the run's, the peer's
// capture, and what must be undone.
type lab struct {
	orig       netns.NsHandle // the caller's namespace: where the ports return
	nsA, nsB   netns.NsHandle
	port, peer string
	macA, macB net.HardwareAddr
	cap        *wire.Capture // on the peer: every frame that crossed the cable
	log        io.Writer
	xdp        *xdpPath // made by the first scenario that needs it
	undo       undoList
}

type undoStep struct {
	what string
	fn   func() error
}

// later registers fn to run at close, in reverse order.
func (l *lab) later(what string, fn func() error) { l.undo.add(what, fn) }

// close undoes everything, last first, and reports what could not be
// undone (the command prints it with the fix).
func (l *lab) close() error { return l.undo.run() }

// run undoes the steps, last first, every one even when some fail.
func (u *undoList) run() error {
	var errs []error
	for i := len(*u) - 1; i >= 0; i-- {
		if err := (*u)[i].fn(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", (*u)[i].what, err))
		}
	}
	*u = nil
	return errors.Join(errs...)
}

// inA and inB run fn on a thread in the port's or the peer's namespace.
func (l *lab) inA(fn func() error) error { return kernel.InNetns(l.nsA, fn) }
func (l *lab) inB(fn func() error) error { return kernel.InNetns(l.nsB, fn) }

// checkFree refuses a port that is in use: moving it to a namespace
// drops its addresses and its place under a bond or bridge, and the run
// would not put them back.
func checkFree(name string) (wasUp bool, err error) {
	li, err := kernel.Link(name)
	if err != nil {
		return false, fmt.Errorf("--port/--peer %s: %w (name a port of this network namespace)", name, err)
	}
	if addrs, err := kernel.LinkAddrs(name); err != nil {
		return false, err
	} else if len(addrs) > 0 {
		return false, fmt.Errorf("%s has address %s: hwcheck moves the port into a namespace of its own, which drops its addresses; give it a port nothing uses (ip addr flush dev %s)", name, addrs[0], name)
	}
	if m, err := kernel.LinkMaster(name); err != nil {
		return false, err
	} else if m != "" {
		return false, fmt.Errorf("%s is a port of %s: hwcheck needs a port nothing uses (ip link set %s nomaster)", name, m, name)
	}
	return li.Up, nil
}

// newLab moves the ports into two new namespaces and configures them.
// On an error it undoes what it did.
func newLab(ctx context.Context, port, peer string, log io.Writer) (l *lab, err error) {
	if port == peer {
		return nil, fmt.Errorf("--port and --peer are both %s: name the two ends of one cable", port)
	}
	l = &lab{port: port, peer: peer, log: log}
	defer func() {
		if err != nil {
			if cerr := l.close(); cerr != nil {
				err = fmt.Errorf("%w; cleaning up: %v", err, cerr)
			}
			l = nil
		}
	}()
	if l.orig, err = netns.Get(); err != nil {
		return l, fmt.Errorf("reading this thread's network namespace: %w", err)
	}
	l.later("close the caller's namespace handle", func() error { return l.orig.Close() })
	upA, err := checkFree(port)
	if err != nil {
		return l, err
	}
	upB, err := checkFree(peer)
	if err != nil {
		return l, err
	}
	for _, ns := range []*netns.NsHandle{&l.nsA, &l.nsB} {
		if *ns, err = kernel.NewNetns(nil); err != nil {
			return l, err
		}
		h := *ns
		l.later("remove a namespace of the run", func() error { return h.Close() })
	}
	if err := l.move(port, l.nsA, upA); err != nil {
		return l, err
	}
	if err := l.move(peer, l.nsB, upB); err != nil {
		return l, err
	}
	if err := l.inA(func() error { return configure(port, netip.PrefixFrom(linkA, 24), innerA, netB) }); err != nil {
		return l, err
	}
	if err := l.inB(func() error { return configure(peer, netip.PrefixFrom(linkB, 24), innerB, netA) }); err != nil {
		return l, err
	}
	if err := l.neighbours(); err != nil {
		return l, err
	}
	fmt.Fprintf(log, "waiting for carrier on %s and %s\n", port, peer)
	if err := l.waitCarrier(ctx); err != nil {
		return l, err
	}
	err = l.inB(func() error {
		c, err := wire.Start(peer, wire.Options{Outgoing: true, KeepBytes: true})
		l.cap = c
		return err
	})
	if err != nil {
		return l, err
	}
	l.later("stop the capture on "+peer, func() error { l.cap.Stop(); return nil })
	return l, l.checkCable(ctx)
}

// move puts a port into ns and registers its way back, with its admin
// state as it was.
func (l *lab) move(name string, ns netns.NsHandle, wasUp bool) error {
	if err := kernel.LinkSetNetns(name, ns); err != nil {
		return fmt.Errorf("%w (hwcheck needs root, and a port that may change namespace)", err)
	}
	l.later("return "+name+" to its namespace", func() error {
		err := kernel.InNetns(ns, func() error { return kernel.LinkSetNetns(name, l.orig) })
		if err != nil {
			return fmt.Errorf("%w (if the run is gone, the kernel returns the port to the initial namespace when the namespace dies)", err)
		}
		return kernel.LinkSetUp(name, wasUp)
	})
	return nil
}

// configure gives a port its link address, the host behind it an inner
// address on lo, and a device route to the other side's inner subnet,
// IPv6 off (no router or neighbour chatter on the wire).
func configure(port string, link netip.Prefix, inner netip.Addr, far netip.Prefix) error {
	for _, dev := range []string{"lo", port} {
		if err := kernel.LinkSetUp(dev, true); err != nil {
			return err
		}
	}
	if err := kernel.SetSysctl("net/ipv6/conf/"+port+"/disable_ipv6", "1"); err != nil {
		return err
	}
	if err := kernel.AddrAdd(port, link, false); err != nil {
		return err
	}
	if err := kernel.AddrAdd("lo", netip.PrefixFrom(inner, 32), false); err != nil {
		return err
	}
	return kernel.RouteDev(far, port, inner)
}

// neighbours makes every address the lab sends to resolve without ARP:
// tunnel-mode traffic a host sends itself leaves with the inner
// destination as next hop (docs/testing.md), so that one needs an entry
// too.
func (l *lab) neighbours() error {
	var err error
	if err = l.inA(func() error { li, err := kernel.Link(l.port); l.macA = li.MAC; return err }); err != nil {
		return err
	}
	if err = l.inB(func() error { li, err := kernel.Link(l.peer); l.macB = li.MAC; return err }); err != nil {
		return err
	}
	err = l.inA(func() error {
		for _, ip := range []netip.Addr{linkB, innerB, xdpDst} {
			if err := kernel.NeighPermanent(l.port, ip, l.macB); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return l.inB(func() error {
		for _, ip := range []netip.Addr{linkA, innerA} {
			if err := kernel.NeighPermanent(l.peer, ip, l.macA); err != nil {
				return err
			}
		}
		return nil
	})
}

func (l *lab) waitCarrier(ctx context.Context) error {
	deadline := time.Now().Add(carrierWait)
	for {
		var a, b bool
		_ = l.inA(func() error { var err error; a, err = kernel.LinkCarrier(l.port); return err })
		_ = l.inB(func() error { var err error; b, err = kernel.LinkCarrier(l.peer); return err })
		if a && b {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no carrier on %s (%v) or %s (%v) after %s: are they cabled to each other, and is the link up on both?",
				l.port, a, l.peer, b, carrierWait)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// checkCable sends cleartext from the port (no policy yet) and finds it
// on the peer: the two are the ends of one cable.
func (l *lab) checkCable(ctx context.Context) error {
	frames, err := l.sendAndCapture(ctx, 3)
	if err != nil {
		return err
	}
	if c := wire.Tally(frames, flowOf(innerA, innerB)); c[wire.Cleartext] == 0 {
		return fmt.Errorf("3 datagrams sent on %s did not arrive on %s (%s): are the two cabled to each other?", l.port, l.peer, c)
	}
	return nil
}

// settle is how long frames may take to cross the cable and the
// capture; a TCG VM needs it, hardware much less.
const settle = 300 * time.Millisecond

// mark drains the peer's capture and marks its end.
func (l *lab) mark() (wire.Mark, error) { return l.cap.Drain(10 * time.Second) }

// sendAndCapture sends n datagrams innerA -> innerB from the port and
// returns the frames that arrived on the peer meanwhile.
func (l *lab) sendAndCapture(ctx context.Context, n int) ([]wire.Frame, error) {
	return l.captureWhile(func() error { return l.sendUDP(ctx, innerA, innerB, n) })
}

// captureWhile runs send and returns the frames that arrived on the peer
// meanwhile.
func (l *lab) captureWhile(send func() error) ([]wire.Frame, error) {
	m, err := l.mark()
	if err != nil {
		return nil, err
	}
	if err := send(); err != nil {
		return nil, err
	}
	return l.framesSince(m)
}

// framesSince waits for the frames in flight, then returns what arrived
// on the peer since m (not what the peer sent).
func (l *lab) framesSince(m wire.Mark) ([]wire.Frame, error) {
	time.Sleep(settle)
	if _, err := l.cap.Drain(10 * time.Second); err != nil {
		return nil, err
	}
	var out []wire.Frame
	for _, p := range l.cap.PacketsSince(m) {
		if !p.Outgoing {
			out = append(out, p.Frame)
		}
	}
	return out, nil
}

func flowOf(src, dst netip.Addr) wire.Flow {
	return wire.Flow{Src: netip.PrefixFrom(src, src.BitLen()), Dst: netip.PrefixFrom(dst, dst.BitLen())}
}

// sleep waits d or until ctx ends (an interrupt), whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
