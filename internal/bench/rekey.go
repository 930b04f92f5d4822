// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netns"

	"sluice/internal/kernel"
	"sluice/internal/swan"
)

// sluice bench rekey: constant-rate, sequence-numbered UDP from overlay
// host A to overlay host B while the IKE CHILD_SAs between them are
// rekeyed N times, counting per rekey what was lost, duplicated or
// reordered. Both hosts run charon (their own namespaces and VICI
// sockets); the overlay is up (sluice apply with keying: ike).

// Rekey modes.
const (
	// RekeyChild: A rekeys the CHILD_SA (swanctl --rekey --child).
	RekeyChild = "child"
	// RekeyCollide: A and B rekey the CHILD_SA at the same instant, so
	// the two CREATE_CHILD_SA exchanges cross (a rekey collision).
	RekeyCollide = "collide"
	// RekeyReauth: A reauthenticates the IKE_SA (swanctl --rekey --ike
	// --reauth), which rebuilds the CHILD_SAs: break-before-make unless
	// charon.make_before_break = yes.
	RekeyReauth = "reauth"
	// RekeyIKE: A rekeys the IKE_SA (swanctl --rekey --ike): new IKE keys,
	// the CHILD_SAs and their ESP SAs stay as they are, so nothing on the
	// data path should move.
	RekeyIKE = "ike"
	// RekeyLifetime forces nothing: the CHILD_SA's own (short) rekey_time
	// rekeys it; each change of A's SPIs is one event.
	RekeyLifetime = "lifetime"
)

// RekeyModes lists the modes.
var RekeyModes = []string{RekeyChild, RekeyCollide, RekeyReauth, RekeyIKE, RekeyLifetime}

// RekeyOptions configure one rekey run.
type RekeyOptions struct {
	// NSA and NSB are the ip netns names of sender A and receiver B.
	NSA, NSB string
	// To is B's overlay address (the datagrams cross the overlay); Port
	// its UDP port.
	To   netip.Addr
	Port int
	// ViciA and ViciB are the charons' VICI sockets.
	ViciA, ViciB string
	// ConnA and ConnB name the IKE connections ("": the one whose name
	// starts with sluice-).
	ConnA, ConnB string
	Rekeys       int
	// Interval is the time between rekeys (each rekey's window is the
	// interval centred on it).
	Interval time.Duration
	// Rate is datagrams per second.
	Rate int
	Mode string
	// IKEDelay delays A's IKE packets (UDP 500/4500, both directions out
	// of A) with netem on IKEDev, which makes collisions certain.
	IKEDelay time.Duration
	IKEDev   string
	// Label names the configuration measured (sluice, naive, ...).
	Label string
}

func (o *RekeyOptions) defaults() {
	if o.Port == 0 {
		o.Port = 9999
	}
	if o.Interval == 0 {
		o.Interval = 3 * time.Second
	}
	if o.Rate == 0 {
		o.Rate = 1000
	}
	if o.Mode == "" {
		o.Mode = RekeyChild
	}
	if o.Label == "" {
		o.Label = o.Mode
	}
}

// datagram layout: sequence number, then send time (ns since start).
const rekeyPayload = 16

// RunRekey runs the bench and returns its report.
func RunRekey(ctx context.Context, o RekeyOptions) (*RekeyReport, error) {
	o.defaults()
	if !slices.Contains(RekeyModes, o.Mode) {
		return nil, fmt.Errorf("--mode %q: use one of %s", o.Mode, strings.Join(RekeyModes, ", "))
	}
	if o.Rekeys < 1 || !o.To.IsValid() {
		return nil, errors.New("need --rekeys >= 1 and --to (B's overlay address)")
	}
	ca, err := swan.Connect(ctx, o.ViciA)
	if err != nil {
		return nil, fmt.Errorf("--vici-a: %w", err)
	}
	defer ca.Close()
	cb, err := swan.Connect(ctx, o.ViciB)
	if err != nil {
		return nil, fmt.Errorf("--vici-b: %w", err)
	}
	defer cb.Close()
	if o.ConnA, err = pickConn(ca, o.ConnA, "--conn-a"); err != nil {
		return nil, err
	}
	if o.ConnB, err = pickConn(cb, o.ConnB, "--conn-b"); err != nil {
		return nil, err
	}
	if o.IKEDelay > 0 {
		undo, err := delayIKE(o.NSA, o.IKEDev, o.IKEDelay)
		if err != nil {
			return nil, err
		}
		defer undo()
	}
	rep := newRekeyReport(o)
	if v, err := ca.Version(); err == nil {
		rep.Charon = v.Daemon + " " + v.Version
		rep.Kernel = v.Release
	}
	rx, err := socketIn(o.NSB, func() (*net.UDPConn, error) {
		return net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(o.To, uint16(o.Port))))
	})
	if err != nil {
		return nil, fmt.Errorf("receiver in %s: %w", o.NSB, err)
	}
	defer rx.Close()
	if rep.ReceiveBuffer, err = bigReceiveBuffer(rx); err != nil {
		return nil, fmt.Errorf("receiver socket: %w", err)
	}
	tx, err := socketIn(o.NSA, func() (*net.UDPConn, error) {
		return net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(o.To, uint16(o.Port))))
	})
	if err != nil {
		return nil, fmt.Errorf("sender in %s: %w", o.NSA, err)
	}
	defer tx.Close()

	// The counters that say where a datagram was dropped: sampled
	// before the traffic, at every window boundary and after the drain.
	sampler, err := openSampler(o.NSA, o.NSB)
	if err != nil {
		return nil, err
	}
	defer sampler.Close()
	var socketDrops atomic.Uint64
	sampler.socketDrops = socketDrops.Load
	samples := []map[string]uint64{sampler.sample()}
	boundary := func() { samples = append(samples, sampler.sample()) }
	start := time.Now()
	var arrivals []uint64
	rxDone := make(chan struct{})
	go func() {
		defer close(rxDone)
		receive(rx, &arrivals, &socketDrops)
	}()
	var sentAt []time.Duration // by sequence number
	sendErrs := map[uint64]string{}
	stop := make(chan struct{})
	txDone := make(chan error, 1)
	go func() { txDone <- sendPaced(tx, o.Rate, start, &sentAt, sendErrs, stop) }()

	time.Sleep(o.Interval / 2)
	events, err := triggerRekeys(ctx, o, ca, cb, start, boundary)
	time.Sleep(o.Interval / 2)
	close(stop)
	txErr := <-txDone
	time.Sleep(time.Second) // the last datagrams in flight
	boundary()              // the drain belongs to the last window
	rx.Close()
	<-rxDone
	if err != nil {
		return nil, err
	}
	if txErr != nil {
		return nil, fmt.Errorf("sender: %w", txErr)
	}
	rep.Duration = time.Since(start).Seconds()
	if len(sentAt) > 0 {
		rep.AchievedRate = float64(len(sentAt)) / sentAt[len(sentAt)-1].Seconds()
	}
	rep.account(events, sentAt, arrivals, o.Interval)
	rep.explain(samples, sendErrs, sentAt, o.Interval)
	return rep, nil
}

func pickConn(c *swan.Client, name, flag string) (string, error) {
	if name != "" {
		return name, nil
	}
	names, err := c.ConnNames()
	if err != nil {
		return "", err
	}
	var ours []string
	for _, n := range names {
		if strings.HasPrefix(n, "sluice-") {
			ours = append(ours, n)
		}
	}
	if len(ours) != 1 {
		return "", fmt.Errorf("%s: %d sluice connections loaded (%s); name one", flag, len(ours), strings.Join(ours, ", "))
	}
	return ours[0], nil
}

// socketIn opens a socket inside network namespace name ("" : here); the
// socket stays in it.
func socketIn(name string, open func() (*net.UDPConn, error)) (*net.UDPConn, error) {
	if name == "" {
		return open()
	}
	h, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", name, err)
	}
	defer h.Close()
	var c *net.UDPConn
	err = kernel.InNetns(h, func() error {
		var err error
		c, err = open()
		return err
	})
	return c, err
}

// sendPaced sends sequence-numbered datagrams at rate until stop, every
// millisecond what is due (TCG timers are coarse), recording each
// datagram's own send time. A sender that falls behind (a slow guest)
// catches up by at most 10 ms worth per tick rather than in one burst,
// so the windows stay honest and the receiver is not flooded.
func sendPaced(c *net.UDPConn, rate int, start time.Time, sentAt *[]time.Duration, sendErrs map[uint64]string, stop chan struct{}) error {
	buf := make([]byte, rekeyPayload)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var seq uint64
	burst := uint64(max(1, rate/100))
	for {
		select {
		case <-stop:
			return nil
		case <-tick.C:
		}
		due := min(uint64(time.Since(start).Seconds()*float64(rate)), seq+burst)
		for ; seq < due; seq++ {
			el := time.Since(start)
			binary.BigEndian.PutUint64(buf, seq)
			binary.BigEndian.PutUint64(buf[8:], uint64(el))
			*sentAt = append(*sentAt, el)
			if _, err := c.Write(buf); err != nil {
				if !isTransient(err) {
					return err
				}
				sendErrs[seq] = errName(err)
			}
		}
	}
}

// isTransient: a datagram the kernel refused (no SA yet: EAGAIN from an
// acquire, ENOBUFS) is counted as lost, not fatal.
func isTransient(err error) bool {
	s := err.Error()
	return strings.Contains(s, "resource temporarily unavailable") || strings.Contains(s, "no buffer space") ||
		strings.Contains(s, "connection refused") || strings.Contains(s, "operation not permitted")
}

// triggerRekeys forces (or, for lifetime, waits for) o.Rekeys rekeys, one
// per interval, and returns when each happened.
// boundary is called between windows (half an interval before each rekey
// but the first); the lifetime mode has no windows of its own.
func triggerRekeys(ctx context.Context, o RekeyOptions, ca, cb *swan.Client, start time.Time, boundary func()) ([]RekeyEvent, error) {
	var events []RekeyEvent
	if o.Mode == RekeyLifetime {
		return watchRekeys(ctx, o, ca, start)
	}
	next := time.Now()
	for i := 1; i <= o.Rekeys; i++ {
		if i > 1 {
			time.Sleep(time.Until(next.Add(-o.Interval / 2)))
			boundary()
		}
		time.Sleep(time.Until(next))
		next = next.Add(o.Interval)
		ev := RekeyEvent{N: i, At: time.Since(start).Seconds()}
		var err error
		switch o.Mode {
		case RekeyChild:
			err = ca.RekeyChild(o.ConnA)
		case RekeyReauth:
			err = ca.Reauth(o.ConnA)
		case RekeyIKE:
			err = ca.RekeyIKE(o.ConnA)
		case RekeyCollide:
			var wg sync.WaitGroup
			var eb error
			wg.Add(1)
			go func() { defer wg.Done(); eb = cb.RekeyChild(o.ConnB) }()
			err = ca.RekeyChild(o.ConnA)
			wg.Wait()
			err = errors.Join(err, eb)
		}
		if err != nil {
			ev.Error = err.Error()
		}
		events = append(events, ev)
		if ctx.Err() != nil {
			return events, ctx.Err()
		}
	}
	return events, nil
}

// watchRekeys polls A's CHILD_SAs and records each new inbound SPI.
func watchRekeys(ctx context.Context, o RekeyOptions, ca *swan.Client, start time.Time) ([]RekeyEvent, error) {
	var events []RekeyEvent
	seen := map[uint32]bool{}
	if cs, err := ca.OverlayChildren(o.ConnA); err == nil {
		for _, c := range cs {
			seen[c.SPIIn] = true
		}
	}
	deadline := time.Now().Add(time.Duration(o.Rekeys+2) * 3 * o.Interval)
	for len(events) < o.Rekeys {
		if time.Now().After(deadline) {
			return events, fmt.Errorf("%d of %d rekeys seen before the deadline: is rekey-time shorter than --interval?", len(events), o.Rekeys)
		}
		if ctx.Err() != nil {
			return events, ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
		cs, err := ca.OverlayChildren(o.ConnA)
		if err != nil {
			return events, err
		}
		for _, c := range cs {
			if c.State == "INSTALLED" && !seen[c.SPIIn] {
				seen[c.SPIIn] = true
				events = append(events, RekeyEvent{N: len(events) + 1, At: time.Since(start).Seconds()})
			}
		}
	}
	return events, nil
}

// delayIKE puts netem delay on IKE packets leaving dev in ns: a prio
// qdisc whose third band is netem, and u32 filters sending UDP 500/4500
// there. Everything else (ESP) keeps its path.
func delayIKE(ns, dev string, d time.Duration) (func(), error) {
	if dev == "" {
		return nil, errors.New("--ike-delay needs --ike-dev (A's underlay device)")
	}
	tc := func(args ...string) error {
		argv := append([]string{"netns", "exec", ns, "tc"}, args...)
		if ns == "" {
			argv = args
		}
		name := "ip"
		if ns == "" {
			name = "tc"
		}
		out, err := exec.Command(name, argv...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("tc %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	undo := func() { _ = tc("qdisc", "del", "dev", dev, "root") }
	steps := [][]string{
		{"qdisc", "add", "dev", dev, "root", "handle", "1:", "prio"},
		{"qdisc", "add", "dev", dev, "parent", "1:3", "handle", "30:", "netem", "delay", fmt.Sprintf("%dms", d.Milliseconds())},
	}
	for _, port := range []string{"500", "4500"} {
		for _, dir := range []string{"sport", "dport"} {
			steps = append(steps, []string{"filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
				"match", "ip", "protocol", "17", "0xff", "match", "ip", dir, port, "0xffff", "flowid", "1:3"})
		}
	}
	for _, s := range steps {
		if err := tc(s...); err != nil {
			undo()
			if strings.Contains(err.Error(), "netem") {
				return nil, fmt.Errorf("%w (the kernel needs sch_netem: modprobe sch_netem)", err)
			}
			return nil, err
		}
	}
	return undo, nil
}
