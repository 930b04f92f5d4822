// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"sluice/internal/wire"
)

// The wire oracle: what crossed a wire, seen by a capture (AF_PACKET) and
// classified by internal/wire (which `sluice hwcheck` shares), never by the NIC model's own counters. A leak assertion
// that reads the model's counters lets the model grade itself; the oracle
// reads the frames.
//
// On a NIC model wire, capture on the far port's tap (NicWireOracle): a
// capture on the port itself also sees what the far host decrypted, the
// model's packet offload and the kernel's own software ESP alike (a
// tunnel-mode packet esp4 decrypted is received again on the port, and
// AF_PACKET sees it there as cleartext). The tap gets each frame as it
// came off the wire, before anything of the receiving host.

// The classifier is internal/wire's, shared with `sluice hwcheck`: these
// names keep the tests' spelling.
type (
	FrameClass = wire.FrameClass
	Frame      = wire.Frame
	Flow       = wire.Flow
	Count      = wire.Count
	Mark       = wire.Mark
)

const (
	ESP         = wire.ESP
	Cleartext   = wire.Cleartext
	LinkControl = wire.LinkControl
	NonIP       = wire.NonIP
)

// FlowOf parses "SRC DST" prefixes (or addresses) into a Flow.
func FlowOf(src, dst string) Flow { return wire.FlowOf(src, dst) }

// ClassifyFrame reads an Ethernet frame (behind up to two VLAN tags).
func ClassifyFrame(b []byte) Frame { return wire.ClassifyFrame(b) }

// Tally counts frames by class: those of flow only, or all with the zero
// Flow (then non-IP frames count too).
func Tally(frames []Frame, flow Flow) Count { return wire.Tally(frames, flow) }

// WireOracle captures every frame one device receives (wire.Capture),
// failing the test on a capture error.
type WireOracle struct {
	ns, dev string
	c       *wire.Capture
}

// StartWireOracle captures on dev in ns until the test ends. Frames the
// host itself sends on dev are left out: the oracle sees what arrives.
// On a model port use NicWireOracle (see above).
func StartWireOracle(t testing.TB, ns, dev string) *WireOracle {
	t.Helper()
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatalf("wire oracle: netns %s: %v", ns, err)
	}
	defer h.Close()
	o := &WireOracle{ns: ns, dev: dev}
	InNetnsHandle(t, h, func() {
		if o.c, err = wire.Start(dev, wire.Options{}); err != nil {
			t.Fatalf("wire oracle in %s: %v", ns, err)
		}
	})
	t.Cleanup(o.Stop)
	return o
}

// Stop ends the capture (the test's cleanup does it too).
func (o *WireOracle) Stop() { o.c.Stop() }

// Drain waits until every frame the device received so far has been read
// (the socket was found empty after the call), then returns a Mark.
func (o *WireOracle) Drain(t testing.TB) Mark {
	t.Helper()
	m, err := o.c.Drain(10 * time.Second)
	if err != nil {
		t.Fatalf("wire oracle in %s: %v", o.ns, err)
	}
	return m
}

// Frames drains the capture and returns the frames after m.
func (o *WireOracle) Frames(t testing.TB, m Mark) []Frame {
	t.Helper()
	o.Drain(t)
	return o.Since(m)
}

// Since returns the frames read after m (call Drain first, or Frames).
func (o *WireOracle) Since(m Mark) []Frame { return o.c.Since(m) }

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
