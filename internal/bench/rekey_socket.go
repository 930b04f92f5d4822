// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"encoding/binary"
	"errors"
	"net"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// receiveBuffer is the receiver's socket buffer: 8 MiB holds minutes of
// the bench's datagrams, so a receiver descheduled for a while (a loaded
// TCG guest) does not overflow it.
const receiveBuffer = 8 << 20

// bigReceiveBuffer sets the receiver's buffer with SO_RCVBUFFORCE (plain
// SO_RCVBUF is capped by net.core.rmem_max, 208 KiB by default) and turns
// on SO_RXQ_OVFL, which hands each datagram the socket's drop count. It
// returns the buffer the kernel granted.
func bigReceiveBuffer(c *net.UDPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var got int
	var serr error
	err = rc.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, receiveBuffer); serr != nil {
			// Without CAP_NET_ADMIN: what rmem_max allows.
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, receiveBuffer)
		}
		if serr == nil {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1)
		}
		if serr == nil {
			got, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		}
	})
	return got, errors.Join(err, serr)
}

// receive reads datagrams until the socket is closed, appending each
// one's sequence number to arrivals and keeping drops at the socket's
// drop count (SO_RXQ_OVFL: datagrams the socket had no room for).
func receive(c *net.UDPConn, arrivals *[]uint64, drops *atomic.Uint64) {
	buf := make([]byte, 64)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := c.ReadMsgUDP(buf, oob)
		if err != nil {
			return
		}
		if d, ok := rxqOverflow(oob[:oobn]); ok {
			drops.Store(uint64(d))
		}
		if n >= rekeyPayload {
			*arrivals = append(*arrivals, binary.BigEndian.Uint64(buf))
		}
	}
}

// rxqOverflow finds the SO_RXQ_OVFL count among a datagram's control
// messages (absent until the first drop).
func rxqOverflow(oob []byte) (uint32, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_RXQ_OVFL && len(m.Data) >= 4 {
			return binary.NativeEndian.Uint32(m.Data), true
		}
	}
	return 0, false
}

// errName is a write error's errno name (EAGAIN, ENOBUFS, ...), or its
// text.
func errName(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		if n := unix.ErrnoName(en); n != "" {
			return n
		}
	}
	return err.Error()
}
