// SPDX-License-Identifier: Apache-2.0

package hwcheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// The traffic of the scenarios: datagrams a host sends itself (through
// its kernel's xfrm), a receiver that counts what a host delivers, and
// raw frames written to a device (no kernel xfrm: XDP's path, a replay).

const (
	discardPort = 9     // what the datagrams are sent to
	recvPort    = 40009 // what the receiver listens on
	sendGap     = 50 * time.Millisecond
)

// sendUDP sends n datagrams src -> dst from the namespace that owns src.
func (l *lab) sendUDP(ctx context.Context, src, dst netip.Addr, n int) error {
	return l.sendUDPTo(ctx, src, netip.AddrPortFrom(dst, discardPort), n)
}

func (l *lab) sendUDPTo(ctx context.Context, src netip.Addr, dst netip.AddrPort, n int) error {
	in := l.inA
	if src == innerB || src == linkB {
		in = l.inB
	}
	// Unconnected: a connected socket turns the peer's ICMP port
	// unreachable into an error on the next send, which then sends
	// nothing (every other datagram of a cleartext flow was lost so).
	var conn *net.UDPConn
	err := in(func() error {
		var err error
		conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)))
		return err
	})
	if err != nil {
		return fmt.Errorf("udp socket %s -> %s: %w", src, dst, err)
	}
	defer conn.Close()
	payload := make([]byte, 64)
	for i := range n {
		payload[0] = byte(i)
		// A send can fail (EPERM: a policy blocks; EAGAIN while the kernel
		// resolves the SA): what crosses the cable is what is measured.
		_, _ = conn.WriteToUDPAddrPort(payload, dst)
		if err := sleep(ctx, sendGap); err != nil {
			return err
		}
	}
	return nil
}

// receiver counts the datagrams the port's host delivers to innerA:recvPort.
type receiver struct{ conn *net.UDPConn }

func (l *lab) listenA() (*receiver, error) {
	r := &receiver{}
	err := l.inA(func() error {
		var err error
		r.conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(innerA, recvPort)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("udp listener on %s:%d: %w", innerA, recvPort, err)
	}
	return r, nil
}

// count reads what arrived until the socket stays quiet for settle.
func (r *receiver) count() int {
	n, buf := 0, make([]byte, 2048)
	for {
		_ = r.conn.SetReadDeadline(time.Now().Add(2 * settle))
		if _, err := r.conn.Read(buf); err != nil {
			return n
		}
		n++
	}
}

func (r *receiver) close() { _ = r.conn.Close() }

// rawSender writes whole frames to one device (AF_PACKET).
type rawSender struct {
	fd      int
	ifindex int
}

// newRawSender opens a sender on dev; call it inside the device's
// namespace.
func newRawSender(dev string) (*rawSender, error) {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket on %s: %w", dev, err)
	}
	return &rawSender{fd: fd, ifindex: ifi.Index}, nil
}

func (s *rawSender) send(ctx context.Context, frame []byte, n int) error {
	to := &unix.SockaddrLinklayer{Ifindex: s.ifindex, Halen: 6}
	copy(to.Addr[:], frame[:6])
	for range n {
		if err := unix.Sendto(s.fd, frame, 0, to); err != nil && !errors.Is(err, unix.ENOBUFS) {
			return fmt.Errorf("sending a frame on #%d: %w", s.ifindex, err)
		}
		if err := sleep(ctx, sendGap); err != nil {
			return err
		}
	}
	return nil
}

func (s *rawSender) close() { _ = unix.Close(s.fd) }
