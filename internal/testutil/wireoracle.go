// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The wire oracle: what crossed a wire, seen by a capture (AF_PACKET) and
// classified here, never by the NIC model's own counters. A leak assertion
// that reads the model's counters lets the model grade itself; the oracle
// reads the frames.
//
// On a NIC model wire, capture on the far port's tap (NicWireOracle): a
// capture on the port itself also sees what the far host decrypted, the
// model's packet offload and the kernel's own software ESP alike (a
// tunnel-mode packet esp4 decrypted is received again on the port, and
// AF_PACKET sees it there as cleartext). The tap gets each frame as it
// came off the wire, before anything of the receiving host.

// FrameClass is what a captured frame is.
type FrameClass int

const (
	// ESP is IPsec: IP protocol 50 (IPv6: after extension headers), or
	// ESP in UDP 4500 (RFC 3948, non-zero SPI).
	ESP FrameClass = iota
	// Cleartext is any other IP packet, data that should have been ESP.
	Cleartext
	// LinkControl is the host's own link traffic that goes out in clear
	// on any NIC: ARP, LLDP, LACP, IGMP and 224.0.0.0/24, IPv6 neighbour
	// discovery, MLD and link-local traffic.
	LinkControl
	// NonIP is any other ethertype: it may carry data, so a "no
	// cleartext at all" assertion counts it.
	NonIP
)

func (c FrameClass) String() string {
	return [...]string{"esp", "cleartext", "link-control", "non-ip"}[c]
}

// Frame is one captured frame, classified.
type Frame struct {
	Class     FrameClass
	EtherType uint16 // after VLAN tags
	VLANs     int    // tags in front of it
	Src, Dst  netip.Addr
	Proto     uint8 // IP protocol, after IPv6 extension headers
	Fragment  bool
	SPI, Seq  uint32 // ESP (not in UDP), first fragment or whole
	Len       int
}

func (f Frame) String() string {
	if !f.Src.IsValid() {
		return fmt.Sprintf("%s ethertype %#04x len %d", f.Class, f.EtherType, f.Len)
	}
	s := fmt.Sprintf("%s %s > %s proto %d len %d", f.Class, f.Src, f.Dst, f.Proto, f.Len)
	if f.SPI != 0 {
		s += fmt.Sprintf(" spi %#x seq %d", f.SPI, f.Seq)
	}
	if f.Fragment {
		s += " fragment"
	}
	if f.VLANs > 0 {
		s += fmt.Sprintf(" vlans %d", f.VLANs)
	}
	return s
}

// Flow selects frames by their IP addresses: Src and Dst prefixes, in
// that direction only. The zero Flow selects every IP frame.
type Flow struct {
	Src, Dst netip.Prefix
}

// FlowOf parses "SRC DST" prefixes (or addresses) into a Flow.
func FlowOf(src, dst string) Flow {
	p := func(s string) netip.Prefix {
		if !strings.Contains(s, "/") {
			a := netip.MustParseAddr(s)
			return netip.PrefixFrom(a, a.BitLen())
		}
		return netip.MustParsePrefix(s)
	}
	return Flow{Src: p(src), Dst: p(dst)}
}

// Has reports whether f belongs to the flow.
func (fl Flow) Has(f Frame) bool {
	if !f.Src.IsValid() {
		return false
	}
	return (!fl.Src.IsValid() || fl.Src.Contains(f.Src)) &&
		(!fl.Dst.IsValid() || fl.Dst.Contains(f.Dst))
}

// ClassifyFrame reads an Ethernet frame (behind up to two VLAN tags).
func ClassifyFrame(b []byte) Frame {
	f := Frame{Class: NonIP, Len: len(b)}
	if len(b) < 14 {
		return f
	}
	off := 12
	et := binary.BigEndian.Uint16(b[off:])
	for f.VLANs < 2 && (et == 0x8100 || et == 0x88a8) && len(b) >= off+6 {
		off += 4
		f.VLANs++
		et = binary.BigEndian.Uint16(b[off:])
	}
	off += 2
	f.EtherType = et
	switch et {
	case 0x0806, 0x88cc, 0x8809, 0x888e: // ARP, LLDP, slow protocols (LACP), EAPOL
		f.Class = LinkControl
	case 0x0800:
		classifyIPv4(b[off:], &f)
	case 0x86dd:
		classifyIPv6(b[off:], &f)
	}
	return f
}

func classifyIPv4(p []byte, f *Frame) {
	if len(p) < 20 || p[0]>>4 != 4 {
		return
	}
	ihl := int(p[0]&0xf) * 4
	f.Src, _ = netip.AddrFromSlice(p[12:16])
	f.Dst, _ = netip.AddrFromSlice(p[16:20])
	f.Proto = p[9]
	fragOff := binary.BigEndian.Uint16(p[6:]) & 0x1fff
	f.Fragment = binary.BigEndian.Uint16(p[6:])&0x2000 != 0 || fragOff != 0
	f.Class = Cleartext
	switch {
	case f.Proto == unix.IPPROTO_ESP:
		f.Class = ESP
		f.SPI, f.Seq = espHeader(p, ihl, fragOff)
	case f.Proto == unix.IPPROTO_UDP && fragOff == 0 && isESPInUDP(p, ihl):
		f.Class = ESP
	case f.Proto == unix.IPPROTO_IGMP, f.Dst.As4()[0] == 224 && f.Dst.As4()[1] == 0 && f.Dst.As4()[2] == 0:
		f.Class = LinkControl
	}
}

// espHeader reads SPI and sequence number at off, if there.
func espHeader(p []byte, off int, fragOff uint16) (uint32, uint32) {
	if fragOff != 0 || len(p) < off+8 {
		return 0, 0
	}
	return binary.BigEndian.Uint32(p[off:]), binary.BigEndian.Uint32(p[off+4:])
}

// isESPInUDP: UDP to port 4500 whose payload starts with a non-zero SPI
// (zero is the IKE marker).
func isESPInUDP(p []byte, l4 int) bool {
	if len(p) < l4+12 || binary.BigEndian.Uint16(p[l4+2:]) != 4500 {
		return false
	}
	return binary.BigEndian.Uint32(p[l4+8:]) != 0
}

func classifyIPv6(p []byte, f *Frame) {
	if len(p) < 40 || p[0]>>4 != 6 {
		return
	}
	f.Src, _ = netip.AddrFromSlice(p[8:24])
	f.Dst, _ = netip.AddrFromSlice(p[24:40])
	f.Class = Cleartext
	next, off := p[6], 40
	// Extension headers: hop-by-hop, routing, fragment, destination
	// options, authentication.
walk:
	for n := 0; n < 8 && len(p) >= off+8; n++ {
		switch next {
		case 0, 43, 60:
			next, off = p[off], off+(int(p[off+1])+1)*8
			continue
		case 44:
			f.Fragment = true
			next, off = p[off], off+8
			continue
		case 51:
			next, off = p[off], off+(int(p[off+1])+2)*4
			continue
		}
		break walk
	}
	f.Proto = next
	switch {
	case next == unix.IPPROTO_ESP:
		f.Class = ESP
		f.SPI, f.Seq = espHeader(p, off, 0)
	case next == unix.IPPROTO_UDP && !f.Fragment && isESPInUDP(p, off):
		f.Class = ESP
	case next == unix.IPPROTO_ICMPV6 && len(p) > off && isICMPv6Control(p[off]):
		f.Class = LinkControl
	case f.Src.IsLinkLocalUnicast(), f.Dst.IsLinkLocalUnicast(), f.Dst.IsLinkLocalMulticast(),
		f.Dst.IsInterfaceLocalMulticast():
		f.Class = LinkControl
	}
}

// isICMPv6Control: MLD (130-132, 143), router and neighbour discovery
// (133-137).
func isICMPv6Control(typ byte) bool {
	return (typ >= 130 && typ <= 137) || typ == 143
}

// WireOracle captures every frame one device receives.
type WireOracle struct {
	ns, dev string
	fd      int

	mu     sync.Mutex
	frames []Frame
	idle   time.Time // the last time the socket had nothing to read
	err    error

	stop chan struct{}
	done chan struct{}
}

// StartWireOracle captures on dev in ns until the test ends. Frames the
// host itself sends on dev are left out: the oracle sees what arrives.
// On a model port use NicWireOracle (see above).
func StartWireOracle(t testing.TB, ns, dev string) *WireOracle {
	t.Helper()
	ifindex, _ := Link(t, ns, dev)
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatalf("wire oracle: netns %s: %v", ns, err)
	}
	defer h.Close()
	o := &WireOracle{ns: ns, dev: dev, fd: -1, stop: make(chan struct{}), done: make(chan struct{})}
	InNetnsHandle(t, h, func() {
		proto := htons(unix.ETH_P_ALL)
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
		if err != nil {
			t.Fatalf("wire oracle: AF_PACKET socket in %s: %v", ns, err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifindex}); err != nil {
			_ = unix.Close(fd)
			t.Fatalf("wire oracle: bind to %s in %s: %v", dev, ns, err)
		}
		o.fd = fd
	})
	// A big buffer: a flood must not overflow it between two reads.
	_ = unix.SetsockoptInt(o.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	// The stack takes a frame's outer VLAN tag out of the bytes before
	// AF_PACKET sees them; PACKET_AUXDATA says it was there.
	if err := unix.SetsockoptInt(o.fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
		t.Fatalf("wire oracle: PACKET_AUXDATA: %v", err)
	}
	go o.read()
	t.Cleanup(func() { o.Stop() })
	return o
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (o *WireOracle) read() {
	defer close(o.done)
	buf, oob := make([]byte, 65536), make([]byte, 256)
	pfd := []unix.PollFd{{Fd: int32(o.fd), Events: unix.POLLIN}}
	for {
		select {
		case <-o.stop:
			return
		default:
		}
		m, oobn, _, from, err := unix.Recvmsg(o.fd, buf, oob, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EAGAIN) {
			// Found empty: every frame received before now is read
			// (Drain). Marked here, not on a quiet poll: a flow every
			// 10 ms never leaves the socket quiet for a poll's 20 ms.
			o.mu.Lock()
			o.idle = time.Now()
			o.mu.Unlock()
			if _, err := unix.Poll(pfd, 20); err != nil && !errors.Is(err, unix.EINTR) {
				o.fail(err)
				return
			}
			continue
		}
		// ENETDOWN: the device went down (a failover test does that);
		// the socket stays bound and captures again once it is up.
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENETDOWN) {
			if errors.Is(err, unix.ENETDOWN) {
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		if err != nil {
			o.fail(err)
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		f := ClassifyFrame(buf[:m])
		if strippedVLAN(oob[:oobn]) {
			f.VLANs++
		}
		o.mu.Lock()
		o.frames = append(o.frames, f)
		o.mu.Unlock()
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

func (o *WireOracle) fail(err error) {
	o.mu.Lock()
	o.err = err
	o.mu.Unlock()
}

// Stop ends the capture (the test's cleanup does it too).
func (o *WireOracle) Stop() {
	select {
	case <-o.stop:
		return
	default:
	}
	close(o.stop)
	<-o.done
	_ = unix.Close(o.fd)
}

// Mark is a point in the capture, for Since.
type Mark int

// Drain waits until every frame the device received so far has been read
// (the socket was found empty after the call), then returns a Mark.
func (o *WireOracle) Drain(t testing.TB) Mark {
	t.Helper()
	now := time.Now()
	deadline := now.Add(10 * time.Second)
	for time.Now().Before(deadline) {
		o.mu.Lock()
		idle, err, n := o.idle, o.err, len(o.frames)
		o.mu.Unlock()
		if err != nil {
			t.Fatalf("wire oracle on %s in %s: %v", o.dev, o.ns, err)
		}
		if idle.After(now) {
			return Mark(n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("wire oracle on %s in %s: the capture did not drain in 10 s", o.dev, o.ns)
	return 0
}

// Frames drains the capture and returns the frames after m.
func (o *WireOracle) Frames(t testing.TB, m Mark) []Frame {
	t.Helper()
	o.Drain(t)
	return o.Since(m)
}

// Since returns the frames read after m (call Drain first, or Frames).
func (o *WireOracle) Since(m Mark) []Frame {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Frame(nil), o.frames[m:]...)
}

// Count is frames by class.
type Count map[FrameClass]int

func (c Count) String() string {
	return fmt.Sprintf("esp %d, cleartext %d, link-control %d, non-ip %d", c[ESP], c[Cleartext], c[LinkControl], c[NonIP])
}

// Tally counts frames by class: those of flow only, or all with the zero
// Flow (then non-IP frames count too).
func Tally(frames []Frame, flow Flow) Count {
	c := Count{}
	all := flow == Flow{}
	for _, f := range frames {
		if all || flow.Has(f) {
			c[f.Class]++
		}
	}
	return c
}

// Leaks returns the frames after m that should have been ESP: cleartext
// IP frames of flow (the zero Flow: every cleartext and non-IP frame).
func (o *WireOracle) Leaks(t testing.TB, m Mark, flow Flow) []Frame {
	t.Helper()
	o.Drain(t)
	var out []Frame
	all := flow == Flow{}
	for _, f := range o.Since(m) {
		if (f.Class == Cleartext && (all || flow.Has(f))) || (all && f.Class == NonIP) {
			out = append(out, f)
		}
	}
	return out
}

// NoCleartext fails the test if any frame of flow crossed the wire in
// cleartext after m; what names the traffic in the message.
func (o *WireOracle) NoCleartext(t testing.TB, m Mark, flow Flow, what string) {
	t.Helper()
	if leaks := o.Leaks(t, m, flow); len(leaks) > 0 {
		t.Errorf("%s: %d cleartext frame(s) on the wire (capture on %s in %s), first: %s",
			what, len(leaks), o.dev, o.ns, leaks[0])
	}
}

// NicTap gives a model port a tap (kmod/nicmodel's new_tap) that receives
// a copy of every frame the port receives from the wire, before the port
// decrypts anything, and returns the tap's name. The tap goes with its
// port.
func NicTap(t testing.TB, ns, port string) string {
	t.Helper()
	tap := port + "t"
	if len(tap) > 15 {
		t.Fatalf("NicTap: the tap's name %q is too long for a device: name the port shorter", tap)
	}
	NSRun(t, ns, "sh", "-c", "echo '"+port+" "+tap+"' > /sys/module/nicmodel/parameters/new_tap")
	NSRun(t, ns, "sysctl", "-qw", "net.ipv6.conf."+tap+".disable_ipv6=1")
	Run(t, "ip", "-n", ns, "link", "set", tap, "up")
	return tap
}

// NicWireOracle is the wire oracle of a model port: StartWireOracle on a
// new tap of the port, which sees the wire as it was.
func NicWireOracle(t testing.TB, ns, port string) *WireOracle {
	t.Helper()
	return StartWireOracle(t, ns, NicTap(t, ns, port))
}
