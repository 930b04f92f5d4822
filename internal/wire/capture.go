// SPDX-License-Identifier: Apache-2.0

package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Options change what a Capture keeps.
type Options struct {
	// Outgoing keeps the frames the host itself sends on the device too
	// (left out by default: a capture sees what arrives).
	Outgoing bool
	// KeepBytes keeps each frame's bytes (Packet.Bytes), for a caller
	// that sends a frame again (a replay).
	KeepBytes bool
}

// Packet is a captured frame with what the capture knows of it.
type Packet struct {
	Frame
	// Outgoing: the host sent it (Options.Outgoing).
	Outgoing bool
	// Bytes is the frame as captured (Options.KeepBytes), without a VLAN
	// tag the stack took out (Frame.VLANs counts it).
	Bytes []byte
}

// Capture reads every frame one device receives (AF_PACKET) until Stop.
type Capture struct {
	Dev string
	fd  int
	opt Options

	mu      sync.Mutex
	packets []Packet
	idle    time.Time // the last time the socket had nothing to read
	err     error

	stop chan struct{}
	done chan struct{}
}

// Start captures on dev of the calling thread's network namespace: a
// socket keeps the namespace it was made in, so call it inside the
// namespace (kernel.InNetns) and read it from anywhere. (wire does not
// enter namespaces itself: internal/kernel's own tests use the oracle.)
func Start(dev string, opt Options) (*Capture, error) {
	c := &Capture{Dev: dev, fd: -1, opt: opt, stop: make(chan struct{}), done: make(chan struct{})}
	proto := htons(unix.ETH_P_ALL)
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return nil, fmt.Errorf("capture on %s: %w", dev, err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return nil, fmt.Errorf("capture on %s: AF_PACKET socket: %w (needs CAP_NET_RAW)", dev, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("capture on %s: bind: %w", dev, err)
	}
	c.fd = fd
	// A big buffer: a flood must not overflow it between two reads.
	_ = unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	// The stack takes a frame's outer VLAN tag out of the bytes before
	// AF_PACKET sees them; PACKET_AUXDATA says it was there.
	if err := unix.SetsockoptInt(c.fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
		_ = unix.Close(c.fd)
		return nil, fmt.Errorf("capture on %s: PACKET_AUXDATA: %w", dev, err)
	}
	go c.read()
	return c, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (c *Capture) read() {
	defer close(c.done)
	buf, oob := make([]byte, 65536), make([]byte, 256)
	pfd := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN}}
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		m, oobn, _, from, err := unix.Recvmsg(c.fd, buf, oob, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EAGAIN) {
			// Found empty: every frame received before now is read
			// (Drain). Marked here, not on a quiet poll: a flow every
			// 10 ms never leaves the socket quiet for a poll's 20 ms.
			c.mu.Lock()
			c.idle = time.Now()
			c.mu.Unlock()
			if _, err := unix.Poll(pfd, 20); err != nil && !errors.Is(err, unix.EINTR) {
				c.fail(err)
				return
			}
			continue
		}
		// ENETDOWN: the device went down (a failover does that); the
		// socket stays bound and captures again once it is up.
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENETDOWN) {
			if errors.Is(err, unix.ENETDOWN) {
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		if err != nil {
			c.fail(err)
			return
		}
		p := Packet{}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			if !c.opt.Outgoing {
				continue
			}
			p.Outgoing = true
		}
		p.Frame = ClassifyFrame(buf[:m])
		if strippedVLAN(oob[:oobn]) {
			p.VLANs++
		}
		if c.opt.KeepBytes {
			p.Bytes = append([]byte(nil), buf[:m]...)
		}
		c.mu.Lock()
		c.packets = append(c.packets, p)
		c.mu.Unlock()
	}
}

// strippedVLAN reads PACKET_AUXDATA: was a VLAN tag taken off the frame?
func strippedVLAN(oob []byte) bool {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return false
	}
	for _, m := range msgs {
		// struct tpacket_auxdata: tp_status first.
		if m.Header.Level == unix.SOL_PACKET && m.Header.Type == unix.PACKET_AUXDATA && len(m.Data) >= 4 {
			return binary.NativeEndian.Uint32(m.Data)&unix.TP_STATUS_VLAN_VALID != 0
		}
	}
	return false
}

func (c *Capture) fail(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}

// Stop ends the capture; a second call does nothing.
func (c *Capture) Stop() {
	select {
	case <-c.stop:
		return
	default:
	}
	close(c.stop)
	<-c.done
	_ = unix.Close(c.fd)
}

// Mark is a point in the capture, for Since.
type Mark int

// Drain waits until every frame the device received so far has been read
// (the socket was found empty after the call), at most timeout, then
// returns a Mark.
func (c *Capture) Drain(timeout time.Duration) (Mark, error) {
	now := time.Now()
	deadline := now.Add(timeout)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		idle, err, n := c.idle, c.err, len(c.packets)
		c.mu.Unlock()
		if err != nil {
			return 0, fmt.Errorf("capture on %s: %w", c.Dev, err)
		}
		if idle.After(now) {
			return Mark(n), nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, fmt.Errorf("capture on %s: the socket did not drain in %s", c.Dev, timeout)
}

// Since returns the frames read after m (Drain first).
func (c *Capture) Since(m Mark) []Frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Frame, 0, len(c.packets)-int(m))
	for _, p := range c.packets[m:] {
		out = append(out, p.Frame)
	}
	return out
}

// PacketsSince returns the packets read after m, with what Options kept.
func (c *Capture) PacketsSince(m Mark) []Packet {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Packet(nil), c.packets[m:]...)
}
