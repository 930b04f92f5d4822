package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// FlowerWindow is how many filter requests FlowerSocket keeps outstanding
// before it reads acknowledgements: enough to keep the kernel busy, few
// enough that the acks (each echoing its request, ~0.5 KiB) never
// overflow the socket's receive buffer, which is what makes a naive
// sender lose acks with ENOBUFS at a few thousand rules.
const FlowerWindow = 64

// FlowerSocket installs and removes flower filters through one netlink
// socket, pipelining up to FlowerWindow requests.
type FlowerSocket struct {
	s *nl.NetlinkSocket
}

// FlowerError is the kernel's answer to one filter request, with the
// driver's extended-ack message (mlx5 explains its refusals there).
type FlowerError struct {
	Filter *FlowerFilter
	Errno  syscall.Errno
	Msg    string
}

func (e *FlowerError) Error() string {
	s := fmt.Sprintf("tc flower on ifindex %d chain %d pref %d handle %d: %v", e.Filter.Ifindex, e.Filter.Chain, e.Filter.Pref, e.Filter.Handle, e.Errno)
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

func (e *FlowerError) Unwrap() error { return e.Errno }

// OpenFlowerSocket opens the socket (in the calling thread's namespace).
func OpenFlowerSocket() (*FlowerSocket, error) {
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("tc flower: netlink socket: %w", err)
	}
	if err := s.SetExtAck(true); err != nil {
		s.Close()
		return nil, fmt.Errorf("tc flower: extended acks: %w", err)
	}
	_ = s.SetReceiveBufferSize(4<<20, false)
	return &FlowerSocket{s: s}, nil
}

// Close closes the socket.
func (fs *FlowerSocket) Close() { fs.s.Close() }

// Add installs filters; Del removes them (by chain, pref, protocol and
// handle). Both return one error per filter (nil: done), in order, and an
// error for the socket itself (then the outcome of unanswered requests is
// unknown: the caller must dump and reconcile).
func (fs *FlowerSocket) Add(fl []*FlowerFilter) ([]error, error) { return fs.run(fl, false) }

// Del removes filters; see Add.
func (fs *FlowerSocket) Del(fl []*FlowerFilter) ([]error, error) { return fs.run(fl, true) }

// DelAny removes filters by chain, pref and handle whatever their
// protocol (reconciliation knows no more from a dump).
func (fs *FlowerSocket) DelAny(fl []*FlowerFilter) ([]error, error) {
	for _, f := range fl {
		f.anyProto = true
	}
	return fs.run(fl, true)
}

func (fs *FlowerSocket) run(fl []*FlowerFilter, del bool) ([]error, error) {
	errs := make([]error, len(fl))
	pending := map[uint32]int{} // seq -> index
	next := 0
	for next < len(fl) || len(pending) > 0 {
		for next < len(fl) && len(pending) < FlowerWindow {
			req := fl[next].request(del)
			if err := fs.s.Send(req); err != nil {
				return errs, fmt.Errorf("tc flower: send: %w", err)
			}
			pending[req.Seq] = next
			next++
		}
		msgs, _, err := fs.s.Receive()
		if err != nil {
			return errs, fmt.Errorf("tc flower: receive: %w", err)
		}
		for _, m := range msgs {
			i, ok := pending[m.Header.Seq]
			if !ok || m.Header.Type != unix.NLMSG_ERROR {
				continue
			}
			delete(pending, m.Header.Seq)
			errs[i] = ackError(fl[i], m)
		}
	}
	return errs, nil
}

// ackError decodes an NLMSG_ERROR (errno 0: an ack) with its extack.
func ackError(f *FlowerFilter, m syscall.NetlinkMessage) error {
	if len(m.Data) < 4 {
		return nil
	}
	errno := int32(binary.NativeEndian.Uint32(m.Data))
	if errno == 0 {
		return nil
	}
	e := &FlowerError{Filter: f, Errno: syscall.Errno(-errno)}
	rest := m.Data[4:]
	if m.Header.Flags&unix.NLM_F_ACK_TLVS != 0 && len(rest) >= unix.SizeofNlMsghdr {
		l := int(binary.NativeEndian.Uint32(rest))
		if m.Header.Flags&unix.NLM_F_CAPPED != 0 {
			l = unix.SizeofNlMsghdr
		}
		rest = rest[min(len(rest), (l+3)&^3):]
		for len(rest) >= 4 {
			al := int(binary.NativeEndian.Uint16(rest))
			at := binary.NativeEndian.Uint16(rest[2:])
			if al < 4 || al > len(rest) {
				break
			}
			if at == nl.NLMSGERR_ATTR_MSG {
				e.Msg = unix.ByteSliceToString(rest[4:al])
			}
			rest = rest[min(len(rest), (al+3)&^3):]
		}
	}
	return e
}

// EnsureClsact adds a clsact qdisc to the device unless one is there.
func EnsureClsact(ifindex int) error {
	q := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := netlink.QdiscAdd(q); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("clsact qdisc on ifindex %d: %w", ifindex, err)
	}
	return nil
}

// FlowerHandle is one installed filter as a dump reports it.
type FlowerHandle struct {
	Chain  uint32
	Pref   uint16
	Handle uint32
	SkipSW bool
	SkipHW bool
	// Packets the filter's last action (the redirect) counted: software
	// and hardware together.
	Packets uint64
}

// DumpFlower lists the flower filters on the device's clsact ingress, in
// every chain: what reconciliation compares against.
func DumpFlower(ifindex int) ([]FlowerHandle, error) {
	link, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return nil, err
	}
	fl, err := netlink.FilterList(link, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		return nil, fmt.Errorf("tc flower: dump ifindex %d: %w", ifindex, err)
	}
	var out []FlowerHandle
	for _, f := range fl {
		v, ok := f.(*netlink.Flower)
		if !ok || v.Handle == 0 {
			continue
		}
		h := FlowerHandle{Pref: v.Priority, Handle: v.Handle, SkipSW: v.SkipSw, SkipHW: v.SkipHw}
		if v.Chain != nil {
			h.Chain = *v.Chain
		}
		if n := len(v.Actions); n > 0 {
			if st := v.Actions[n-1].Attrs().Statistics; st != nil && st.Basic != nil {
				h.Packets = uint64(st.Basic.Packets)
			}
		}
		out = append(out, h)
	}
	return out, nil
}
