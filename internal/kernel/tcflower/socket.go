// SPDX-License-Identifier: Apache-2.0

package tcflower

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"sluice/internal/kernel/nlattr"
)

// Window is how many filter requests Socket sends in one
// batch (one sendmsg, which the kernel processes message by message before
// it returns) and so keeps outstanding before it reads their
// acknowledgements: enough to spread the cost of a system call over many
// rules, few enough that the acks never overflow the socket's receive
// buffer, which is what makes a naive sender lose acks with ENOBUFS at a
// few thousand rules.
const Window = 64

// flowerBatchBytes bounds a batch's size (a netlink message larger than
// the socket's send buffer is refused with EMSGSIZE).
const flowerBatchBytes = 48 << 10

// flowerAckSlot is the room for one acknowledgement: with NETLINK_CAP_ACK
// an error ack carries the request's header and the extended-ack
// message, not the request.
const flowerAckSlot = 4 << 10

// flowerAckTimeout bounds the wait for an acknowledgement. The kernel
// answers a request before the sendmsg that carried it returns, so a
// missing ack means it was lost: the caller must dump and reconcile.
const flowerAckTimeout = 10 * time.Second

// Socket installs and removes flower filters through one netlink
// socket, Window requests per system call, their acknowledgements
// read Window per system call (recvmmsg), with buffers reused from
// one batch to the next. Not safe for concurrent use.
type Socket struct {
	fd   int
	seq  uint32
	send []byte
	recv []byte // FlowerWindow slots of flowerAckSlot bytes
	iovs []unix.Iovec
	msgs []unix.Mmsghdr
	done []bool // per request of the batch: its ack arrived
}

// Error is the kernel's answer to one filter request, with the
// driver's extended-ack message (mlx5 explains its refusals there).
type Error struct {
	Filter *Filter
	Errno  syscall.Errno
	Msg    string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("tc flower on ifindex %d chain %d pref %d handle %d: %v", e.Filter.Ifindex, e.Filter.Chain, e.Filter.Pref, e.Filter.Handle, e.Errno)
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

func (e *Error) Unwrap() error { return e.Errno }

// Open opens the socket (in the calling thread's namespace).
func Open() (*Socket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("tc flower: netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tc flower: bind netlink socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_EXT_ACK, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tc flower: extended acks: %w", err)
	}
	// Acks without a copy of the request (kernels since 4.2; without it
	// the acks are larger, nothing else changes).
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	fs := &Socket{fd: fd, recv: make([]byte, Window*flowerAckSlot),
		iovs: make([]unix.Iovec, Window), msgs: make([]unix.Mmsghdr, Window), done: make([]bool, Window)}
	for i := range fs.msgs {
		fs.iovs[i].Base = &fs.recv[i*flowerAckSlot]
		fs.iovs[i].SetLen(flowerAckSlot)
		fs.msgs[i].Hdr.Iov = &fs.iovs[i]
		fs.msgs[i].Hdr.SetIovlen(1)
	}
	return fs, nil
}

// Close closes the socket.
func (fs *Socket) Close() { unix.Close(fs.fd) }

// Add installs filters; Del removes them (by chain, pref, protocol and
// handle). Both return one error per filter (nil: done), in order, and an
// error for the socket itself (then the outcome of unanswered requests is
// unknown: the caller must dump and reconcile).
func (fs *Socket) Add(fl []*Filter) ([]error, error) { return fs.run(fl, false) }

// Del removes filters; see Add.
func (fs *Socket) Del(fl []*Filter) ([]error, error) { return fs.run(fl, true) }

// DelAny removes filters by chain, pref and handle whatever their
// protocol (reconciliation knows no more from a dump).
func (fs *Socket) DelAny(fl []*Filter) ([]error, error) {
	for _, f := range fl {
		f.anyProto = true
	}
	return fs.run(fl, true)
}

// run sends the filters in batches, in order (the kernel applies a
// batch's requests one after the other, so order carries over: guards
// before the forwards they protect), and reads each batch's acks before
// the next batch goes.
func (fs *Socket) run(fl []*Filter, del bool) ([]error, error) {
	errs := make([]error, len(fl))
	to := &unix.SockaddrNetlink{Family: unix.AF_NETLINK}
	for start := 0; start < len(fl); {
		fs.send = fs.send[:0]
		first, end := fs.seq+1, start
		for end < len(fl) && end-start < Window && (end == start || len(fs.send) < flowerBatchBytes) {
			fs.seq++
			fs.send = fl[end].appendRequest(fs.send, fs.seq, del)
			end++
		}
		if err := sendRetry(fs.fd, fs.send, to); err != nil {
			return errs, fmt.Errorf("tc flower: send: %w", err)
		}
		if err := fs.acks(fl[start:end], errs[start:end], first); err != nil {
			return errs, err
		}
		start = end
	}
	return errs, nil
}

func sendRetry(fd int, b []byte, to unix.Sockaddr) error {
	for {
		err := unix.Sendto(fd, b, 0, to)
		if err != unix.EINTR {
			return err
		}
	}
}

// acks reads the acknowledgements of one batch, whose first request had
// sequence number first, into errs.
func (fs *Socket) acks(fl []*Filter, errs []error, first uint32) error {
	done := fs.done[:len(fl)]
	clear(done)
	missing := len(fl)
	for missing > 0 {
		n, err := fs.receive()
		if err != nil {
			return fmt.Errorf("tc flower: receive (%d acknowledgements outstanding): %w", missing, err)
		}
		for i := range n {
			if fs.msgs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
				return fmt.Errorf("tc flower: receive: an acknowledgement was truncated (over %d bytes)", flowerAckSlot)
			}
			b := fs.recv[i*flowerAckSlot : i*flowerAckSlot+int(fs.msgs[i].Len)]
			for len(b) >= nlmsgHdrLen {
				l := int(binary.NativeEndian.Uint32(b[nlmsgLen:]))
				if l < nlmsgHdrLen || l > len(b) {
					break
				}
				typ := binary.NativeEndian.Uint16(b[nlmsgType:])
				flags := binary.NativeEndian.Uint16(b[nlmsgFlags:])
				k := binary.NativeEndian.Uint32(b[nlmsgSeq:]) - first // the request's index in the batch
				if typ == unix.NLMSG_ERROR && int(k) < len(fl) && !done[k] {
					done[k] = true
					missing--
					errs[k] = ackError(fl[k], flags, b[nlmsgHdrLen:l])
				}
				b = b[min(len(b), nlAlign(l)):]
			}
		}
	}
	return nil
}

// receive reads up to Window datagrams into the slots and returns
// how many; it waits (up to flowerAckTimeout) only when none is queued.
func (fs *Socket) receive() (int, error) {
	for {
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fs.fd), uintptr(unsafe.Pointer(&fs.msgs[0])), uintptr(len(fs.msgs)),
			unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			pfd := []unix.PollFd{{Fd: int32(fs.fd), Events: unix.POLLIN}}
			ready, err := unix.Poll(pfd, int(flowerAckTimeout/time.Millisecond))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return 0, err
			}
			if ready == 0 {
				return 0, fmt.Errorf("no acknowledgement within %v", flowerAckTimeout)
			}
		default:
			return 0, e
		}
	}
}

// ackError decodes an NLMSG_ERROR's payload (errno 0: an ack) with its
// extended ack.
func ackError(f *Filter, flags uint16, data []byte) error {
	if len(data) < nlmsgerrMsg {
		return nil
	}
	errno := int32(binary.NativeEndian.Uint32(data[nlmsgerrError:]))
	if errno == 0 {
		return nil
	}
	e := &Error{Filter: f, Errno: syscall.Errno(-errno)}
	rest := data[nlmsgerrMsg:]
	if flags&unix.NLM_F_ACK_TLVS != 0 && len(rest) >= nlmsgHdrLen {
		l := int(binary.NativeEndian.Uint32(rest[nlmsgLen:]))
		if flags&unix.NLM_F_CAPPED != 0 {
			l = nlmsgHdrLen
		}
		rest = rest[min(len(rest), nlAlign(l)):]
		_ = nlattr.Walk(rest, func(at uint16, v []byte) {
			if at == nl.NLMSGERR_ATTR_MSG {
				e.Msg = unix.ByteSliceToString(v)
			}
		}) // the extended ack only adds words to the errno
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

// Installed is one installed filter as a dump reports it.
type Installed struct {
	Chain  uint32
	Pref   uint16
	Handle uint32
	SkipSW bool
	SkipHW bool
	// Packets the filter's last action (the redirect) counted: software
	// and hardware together.
	Packets uint64
}
