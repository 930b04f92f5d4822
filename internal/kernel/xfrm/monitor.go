// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// EventKind says what happened to the XFRM database.
type EventKind uint8

const (
	PolicyNew     EventKind = iota + 1 // Policy added
	PolicyUpd                          // Policy replaced (same Index), e.g. new priority
	PolicyDel                          // Policy removed
	PolicyFlush                        // every policy of type Policy.Sub removed
	PolicyExpire                       // Policy hit a lifetime (Hard: it is gone)
	StateNew                           // State added
	StateUpd                           // State replaced
	StateDel                           // State removed
	StateFlush                         // every SA of State.Proto (0: all) removed
	StateExpire                        // State hit a lifetime (Hard: it is gone)
	Resync                             // events were lost: dump everything again
	MonitorFailed                      // the monitor stopped (Err); the channel closes next
	PolicyDefault                      // `ip xfrm policy setdefault`: Default holds all three
	Marker                             // a Mark with Seq came through (see Watch.Mark)
)

var eventKindNames = [...]string{"?", "policy-new", "policy-upd", "policy-del", "policy-flush",
	"policy-expire", "state-new", "state-upd", "state-del", "state-flush", "state-expire",
	"resync", "monitor-failed", "policy-default", "marker"}

func (k EventKind) String() string {
	if int(k) < len(eventKindNames) {
		return eventKindNames[k]
	}
	return "?"
}

// Event is one change to the kernel's policies or SAs. Policy or State
// is set according to Kind; Err explains a Resync or MonitorFailed.
type Event struct {
	Kind   EventKind
	Policy *Policy
	State  *State
	Hard   bool // expire events: hard (entry deleted) or soft (rekey due)
	Err    error
	// Default is what the kernel does with traffic no policy matches,
	// after a PolicyDefault event.
	Default *PolicyDefaults
	Seq     uint32 // Marker
}

// defaultMonitorRcvBuf absorbs a burst of ~100k policy notifications
// (about 300 bytes of skb each) while the consumer is busy.
const defaultMonitorRcvBuf = 32 << 20

// markerType is the message type of a Mark: any value the kernel never
// sends on the XFRM groups (those are XFRM_MSG_*, 0x10-0x29 in Linux 7.2).
const markerType = 0x3e0

// Watch is one subscription to the kernel's policy, SA, expire and migrate
// notifications (and policy-default changes). Each Watch has its own
// socket: after a Resync, drop the watch (cancel its context) and start a
// new one before dumping, so that nothing queued before the overrun is
// applied on top of the dump.
type Watch struct {
	// Events is closed when the watch's context ends or after a
	// MonitorFailed event.
	Events <-chan Event

	portid uint32            // the subscribed socket's netlink port
	marker *nl.NetlinkSocket // sends Marks from markerPid
	mpid   uint32
	lookup *nl.NetlinkSocket // asks for each notified policy (policy_lookup.go)
}

// Mark queues a Marker event carrying seq on the watch's socket, behind
// every notification the kernel has queued there so far. When the Marker
// arrives, every change the kernel announced before Mark was called has
// been delivered (or reported lost with Resync). It fails with EAGAIN
// when the socket is full.
func (w *Watch) Mark(seq uint32) error {
	b := make([]byte, unix.NLMSG_HDRLEN)
	h := (*unix.NlMsghdr)(unsafe.Pointer(&b[0]))
	h.Len, h.Type, h.Seq, h.Pid = unix.NLMSG_HDRLEN, markerType, seq, w.mpid
	err := unix.Sendto(w.marker.GetFd(), b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: w.portid})
	if err != nil {
		return fmt.Errorf("xfrm monitor: queueing a marker: %w", err)
	}
	return nil
}

// Watch subscribes to policy, SA, expire and migrate notifications. Start it
// before the first dump so that no change falls between the two.
//
// Events are never dropped silently: if the consumer (or the process) falls
// behind until the kernel overruns the socket, the kernel says ENOBUFS and
// the consumer receives Resync, after which it must start a new watch and
// dump again.
func (x *Handle) Watch(ctx context.Context) (*Watch, error) {
	s, err := nl.SubscribeAt(x.target(), netns.None(), unix.NETLINK_XFRM,
		nl.XFRMNLGRP_POLICY, nl.XFRMNLGRP_SA, nl.XFRMNLGRP_EXPIRE, nl.XFRMNLGRP_MIGRATE)
	if err != nil {
		return nil, fmt.Errorf("xfrm monitor: subscribe: %w", err)
	}
	w := &Watch{}
	fail := func(what string, err error) (*Watch, error) {
		s.Close()
		if w.marker != nil {
			w.marker.Close()
		}
		if w.lookup != nil {
			w.lookup.Close()
		}
		return nil, fmt.Errorf("xfrm monitor: %s: %w", what, err)
	}
	size := x.RcvBuf
	if size <= 0 {
		size = defaultMonitorRcvBuf
	}
	// SO_RCVBUFFORCE passes net.core.rmem_max but needs CAP_NET_ADMIN;
	// without it, take what rmem_max allows.
	if err := s.SetReceiveBufferSize(size, true); err != nil {
		if err := s.SetReceiveBufferSize(size, false); err != nil {
			return fail("receive buffer", err)
		}
	}
	if w.portid, err = s.GetPid(); err != nil {
		return fail("socket address", err)
	}
	if w.marker, err = nl.GetNetlinkSocketAt(x.target(), netns.None(), unix.NETLINK_XFRM); err != nil {
		return fail("marker socket", err)
	}
	if w.mpid, err = w.marker.GetPid(); err != nil {
		return fail("marker socket address", err)
	}
	if w.lookup, err = nl.GetNetlinkSocketAt(x.target(), netns.None(), unix.NETLINK_XFRM); err != nil {
		return fail("policy lookup socket", err)
	}
	_ = w.lookup.SetExtAck(true)
	lookup := func(p *Policy) (Policy, error) { return lookupPolicyOn(w.lookup, p) }
	ch := make(chan Event, 64)
	w.Events = ch
	// Two readers send on ch: this socket's and the links' (monitor_links.go).
	// ch closes once both have returned; either one stopping stops both.
	stopped := make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { close(stopped) }) }
	send := func(ev Event) bool {
		select {
		case <-stopped:
			return false
		default:
		}
		select {
		case ch <- ev:
			return true
		case <-ctx.Done():
			return false
		case <-stopped:
			return false
		}
	}
	// fatal reports a reader's failure unless the watch is already ending.
	fatal := func(err error) {
		select {
		case <-stopped:
		default:
			if ctx.Err() == nil {
				send(Event{Kind: MonitorFailed, Err: err})
			}
		}
		stop()
	}
	links, err := x.subscribeLinks()
	if err != nil {
		return fail("links", err)
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		readLinksDown(ctx, links, send, fatal)
	}()
	go func() {
		readers.Wait()
		close(ch)
	}()
	go func() { // Close unblocks Receive (the socket is in Go's poller)
		select {
		case <-ctx.Done():
		case <-stopped:
		}
		s.Close()
		w.marker.Close()
		w.lookup.Close()
		links.Close()
	}()
	go func() {
		defer readers.Done()
		defer stop()
		receive(ctx, s, "xfrm monitor", send, fatal, func(msgs []syscall.NetlinkMessage, from *unix.SockaddrNetlink) bool {
			if from.Pid == w.mpid {
				for _, m := range msgs {
					if m.Header.Type == markerType && !send(Event{Kind: Marker, Seq: m.Header.Seq}) {
						return false
					}
				}
				return true
			}
			if from.Pid != nl.PidKernel {
				return true // only the kernel (and our marker) may speak here
			}
			for _, m := range msgs {
				ev, ok, err := decodeXFRMEvent(m.Header.Type, m.Data)
				if err != nil {
					// A message we cannot read is a lost event.
					ev, ok = Event{Kind: Resync, Err: fmt.Errorf("xfrm monitor: message type %d: %w", m.Header.Type, err)}, true
				} else if ok {
					// Notifications leave out the security context.
					ev = lookupPolicyEvent(ev, lookup)
				}
				if ok && !send(ev) {
					return false
				}
			}
			return true
		})
	}()
	return w, nil
}

// receive reads s until ctx ends, handle returns false or s fails: a lost
// notification (ENOBUFS) is a Resync, any other error is fatal. what
// names the socket in messages.
func receive(ctx context.Context, s *nl.NetlinkSocket, what string, send func(Event) bool, fatal func(error),
	handle func(msgs []syscall.NetlinkMessage, from *unix.SockaddrNetlink) bool) {
	for {
		msgs, from, err := s.Receive()
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, unix.ENOBUFS):
			if !send(Event{Kind: Resync, Err: fmt.Errorf("%s: socket overrun: %w", what, err)}) {
				return
			}
		case err != nil:
			fatal(fmt.Errorf("%s: %w", what, err))
			return
		case !handle(msgs, from):
			return
		}
	}
}

// decodeXFRMEvent turns one notification into an event; ok is false only
// for the message types the mirror knows it does not care about
// (ignoredTypes). A migration, and any type this code does not know, is a
// Resync (migrate.go): never dropped.
func decodeXFRMEvent(typ uint16, b []byte) (ev Event, ok bool, err error) {
	switch typ {
	case nl.XFRM_MSG_NEWPOLICY, nl.XFRM_MSG_UPDPOLICY:
		ev.Kind = PolicyNew
		if typ == nl.XFRM_MSG_UPDPOLICY {
			ev.Kind = PolicyUpd
		}
		var p Policy
		p, err = parsePolicyMsg(b)
		ev.Policy = &p
	case nl.XFRM_MSG_DELPOLICY:
		ev.Kind = PolicyDel
		ev.Policy, err = parseDelPolicy(b)
	case nl.XFRM_MSG_POLEXPIRE:
		ev.Kind = PolicyExpire
		if len(b) < xfrmPolExpireLen {
			return ev, false, fmt.Errorf("xfrm_user_polexpire: %d bytes, want %d", len(b), xfrmPolExpireLen)
		}
		var p Policy
		p, err = withAttrs(parsePolicyInfo, applyPolicyAttrs, b[:xfrmPolicyInfoLen], b[xfrmPolExpireLen:])
		ev.Policy, ev.Hard = &p, b[polExpireHard] != 0
	case nl.XFRM_MSG_FLUSHPOLICY:
		// No body; XFRMA_POLICY_TYPE only on kernels with sub policies.
		ev.Kind, ev.Policy = PolicyFlush, &Policy{}
		err = withAttrsOnly(b, func(a map[uint16][]byte) error { return applyPolicyAttrs(ev.Policy, a) })
	case nl.XFRM_MSG_NEWSA, nl.XFRM_MSG_UPDSA:
		ev.Kind = StateNew
		if typ == nl.XFRM_MSG_UPDSA {
			ev.Kind = StateUpd
		}
		var s State
		s, err = parseStateMsg(b)
		ev.State = &s
	case nl.XFRM_MSG_DELSA:
		ev.Kind = StateDel
		ev.State, err = parseDelState(b)
	case nl.XFRM_MSG_EXPIRE:
		ev.Kind = StateExpire
		if len(b) < xfrmExpireLen {
			return ev, false, fmt.Errorf("xfrm_user_expire: %d bytes, want %d", len(b), xfrmExpireLen)
		}
		var s State
		s, err = withAttrs(parseStateInfo, applyStateAttrs, b[:xfrmSAInfoLen], b[xfrmExpireLen:])
		ev.State, ev.Hard = &s, b[expireHard] != 0
	case xfrmMsgGetDefault:
		// The kernel announces `setdefault` with the GETDEFAULT type.
		var d PolicyDefaults
		d, err = parsePolicyDefaults(b)
		ev.Kind, ev.Default = PolicyDefault, &d
	case nl.XFRM_MSG_FLUSHSA:
		if len(b) < 1 {
			return ev, false, fmt.Errorf("xfrm_usersa_flush: empty")
		}
		// IPSEC_PROTO_ANY (255, what strongSwan sends) means AH, ESP and
		// IPcomp: report it as 0, "all", like iproute2's plain flush.
		proto := b[flushProto]
		if proto == 255 {
			proto = 0
		}
		ev.Kind, ev.State = StateFlush, &State{Proto: proto}
	case nl.XFRM_MSG_MIGRATE:
		return migrateResync(b), true, nil
	case xfrmMsgMigrateState:
		return migrateStateResync(b), true, nil
	default:
		if _, ok := ignoredTypes[typ]; ok {
			return ev, false, nil
		}
		return unknownResync(typ), true, nil
	}
	return ev, err == nil, err
}

// withAttrs parses a fixed struct, then the attributes that follow it.
func withAttrs[T any](parse func([]byte) (T, error), apply func(*T, map[uint16][]byte) error, head, attrs []byte) (T, error) {
	v, err := parse(head)
	if err != nil {
		return v, err
	}
	return v, withAttrsOnly(attrs, func(a map[uint16][]byte) error { return apply(&v, a) })
}

func withAttrsOnly(b []byte, apply func(map[uint16][]byte) error) error {
	a, err := xfrmAttrs(b)
	if err != nil {
		return err
	}
	return apply(a)
}

// parseDelPolicy reads XFRM_MSG_DELPOLICY: struct xfrm_userpolicy_id (the
// selector or, for a delete by index, the index) and, from kernels since
// 2.6.19, the whole policy in XFRMA_POLICY. Without it, the id is all we know.
func parseDelPolicy(b []byte) (*Policy, error) {
	if len(b) < xfrmPolicyIDLen {
		return nil, fmt.Errorf("xfrm_userpolicy_id: %d bytes, want %d", len(b), xfrmPolicyIDLen)
	}
	a, err := xfrmAttrs(b[xfrmPolicyIDLen:])
	if err != nil {
		return nil, err
	}
	var p Policy
	if full, ok := a[nl.XFRMA_POLICY]; ok {
		if p, err = parsePolicyInfo(full); err != nil {
			return nil, err
		}
	} else {
		if p.Sel, err = parseSelector(b); err != nil {
			return nil, err
		}
		p.Index, p.Dir = ne.Uint32(b[polIDIndex:]), Dir(b[polIDDir])
	}
	return &p, applyPolicyAttrs(&p, a)
}

// parseDelState reads XFRM_MSG_DELSA: struct xfrm_usersa_id and the whole
// SA in XFRMA_SA.
func parseDelState(b []byte) (*State, error) {
	if len(b) < xfrmSAIDLen {
		return nil, fmt.Errorf("xfrm_usersa_id: %d bytes, want %d", len(b), xfrmSAIDLen)
	}
	a, err := xfrmAttrs(b[xfrmSAIDLen:])
	if err != nil {
		return nil, err
	}
	var s State
	if full, ok := a[nl.XFRMA_SA]; ok {
		if s, err = parseStateInfo(full); err != nil {
			return nil, err
		}
	} else {
		if s.Dst, err = xfrmEndpoint(b[saIDDaddr:], ne.Uint16(b[saIDFamily:])); err != nil {
			return nil, err
		}
		s.SPI, s.Proto = be.Uint32(b[saIDSPI:]), b[saIDProto]
	}
	return &s, applyStateAttrs(&s, a)
}
