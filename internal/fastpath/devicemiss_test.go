// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"sluice/internal/kernel/xfrm"
)

// reasonCount sums one reason's live counters over every interface slot.
func (e *testEnv) reasonCount(r Reason) uint64 {
	e.t.Helper()
	rc, err := e.dp.ReasonCounts()
	if err != nil {
		e.t.Fatal(err)
	}
	var n uint64
	for _, bySlot := range rc {
		n += bySlot[r]
	}
	return n
}

// expectLive runs p through the live program and wants action act, with
// reason r counted once more.
func (e *testEnv) expectLive(p Packet, ingress int, act uint32, r Reason) {
	e.t.Helper()
	before := e.reasonCount(r)
	if ret, _ := e.liveRun(p, ingress); ret != act {
		e.t.Fatalf("live program: %s, want %s (%s)", ActionName(ret), ActionName(act), r)
	}
	if got := e.reasonCount(r) - before; got != 1 {
		e.t.Fatalf("reason %s counted %d times, want once", r, got)
	}
}

// TestDeviceMissGoesToTheKernel: a policy whose offload device would send
// some of its packets in cleartext is never forwarded by XDP: a template
// of reqid 0 (mlx5 matches its TX SA rule on the reqid alone), and a
// subnet selector on a driver that matches selector addresses exactly
// (mlx5 in 6.12). The same selectors on a driver without the quirk, and
// exact or zero addresses on one with it, are forwarded.
func TestDeviceMissGoesToTheKernel(t *testing.T) {
	e := newTestEnv(t)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	w := e.wan
	subnet := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.1.0/24", 100, "123.2.0.1", 1, w)
	exact := tunnelPolicy(xfrm.DirOut, "10.0.0.5/32", "48.0.2.9/32", 100, "123.2.0.2", 2, w)
	anySrc := tunnelPolicy(xfrm.DirOut, "0.0.0.0/0", "48.0.3.9/32", 100, "123.2.0.3", 3, w)
	reqid0 := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.4.0/24", 100, "123.2.0.4", 4, w)
	sa0 := saFor(reqid0, w) // the SA has a reqid; the template asks for any
	reqid0.Tmpls[0].Reqid = 0
	subnet6 := tunnelPolicy(xfrm.DirOut, "fd00::/16", "2001:db8:48:1::/64", 100, "2001:db8:f::99", 5, w)
	snap := Snapshot{Policies: []xfrm.Policy{subnet, exact, anySrc, reqid0, subnet6},
		States: []xfrm.State{saFor(subnet, w), saFor(exact, w), saFor(anySrc, w), sa0, saFor(subnet6, w)}}
	snap.RouteMTU = routeMTUs(snap.States, 1500)

	cases := []struct {
		name       string
		pkt        Packet
		prefix     string // without the quirk
		exactMatch string // on an exact-match driver
	}{
		{"subnet selector", udp("10.0.0.5", "48.0.1.9", 64), "forward-out", "device-miss"},
		{"subnet selector, IPv6", udp("fd00::5", "2001:db8:48:1::9", 64), "forward-out", "device-miss"},
		{"exact addresses", udp("10.0.0.5", "48.0.2.9", 64), "forward-out", "forward-out"},
		{"zero source address (matches all on the device too)", udp("10.0.0.5", "48.0.3.9", 64), "forward-out", "forward-out"},
		{"template reqid 0", udp("10.0.0.5", "48.0.4.9", 64), "device-miss", "device-miss"},
	}
	for _, quirk := range []bool{false, true} {
		s := snap
		if quirk {
			s.Quirks = map[int]DeviceQuirks{w: {ExactSelectors: true}}
		}
		e.apply(s)
		for _, c := range cases {
			want := c.prefix
			if quirk {
				want = c.exactMatch
			}
			d := e.explain(c.pkt, e.lan)
			if d.ReasonName != want {
				t.Errorf("exact-match driver %v, %s: %s, want %s", quirk, c.name, d.ReasonName, want)
			}
			act := uint32(XDPRedirect)
			if want == "device-miss" {
				act = XDPPass
			}
			e.expectLive(c.pkt, e.lan, act, reasonNamed(t, want))
		}
	}
}

func reasonNamed(t *testing.T, name string) Reason {
	t.Helper()
	for r := Reason(0); r < reasonMax; r++ {
		if r.String() == name {
			return r
		}
	}
	t.Fatalf("no reason named %s", name)
	return 0
}

// TestDeviceRefusedHeadersGoToTheKernel: what mlx5 does not encrypt
// (every TX rule carries setup_fte_no_frags; mlx5e_ipsec_offload_ok
// refuses IPv4 options and IPv6 extension headers, ipv6_ext_hdr) is passed
// to the kernel, each variant with its reason, although the packet's
// addresses match a packet-offloaded policy.
func TestDeviceRefusedHeadersGoToTheKernel(t *testing.T) {
	e := newTestEnv(t)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	p4 := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.1.0/24", 100, "123.2.0.1", 1, e.wan)
	p6 := tunnelPolicy(xfrm.DirOut, "fd00::/16", "2001:db8:48:1::/64", 100, "2001:db8:f::99", 2, e.wan)
	snap := Snapshot{Policies: []xfrm.Policy{p4, p6}, States: []xfrm.State{saFor(p4, e.wan), saFor(p6, e.wan)}}
	snap.RouteMTU = routeMTUs(snap.States, 1500)
	e.apply(snap)

	v4 := func(fragOff uint16) []byte {
		f, err := udp("10.0.0.5", "48.0.1.9", 64).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		h := f[14:34]
		binary.BigEndian.PutUint16(h[6:], fragOff)
		binary.BigEndian.PutUint16(h[10:], 0)
		binary.BigEndian.PutUint16(h[10:], checksum(h, 0))
		return f
	}
	v6 := func(next byte) []byte {
		p := udp("fd00::5", "2001:db8:48:1::9", 64)
		p.IPv6Ext = true // an 8-byte header before the UDP one
		f, err := p.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		f[14+6] = next
		return f
	}
	opts, err := Packet{TTL: 64, Src: addr("10.0.0.5"), Dst: addr("48.0.1.9"), Proto: 17, IPOptions: true}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		frame  []byte
		reason string
	}{
		{"the control: a whole IPv4 packet", v4(0x4000), "forward-out"},
		{"first fragment (MF)", v4(0x2000), "fragment"},
		{"last fragment (offset, no MF)", v4(0x0010), "fragment"},
		{"middle fragment (MF and offset)", v4(0x2010), "fragment"},
		{"IPv4 options (ihl 6)", opts, "ip-options"},
		{"IPv6 hop-by-hop", v6(0), "ipv6-ext"},
		{"IPv6 routing", v6(43), "ipv6-ext"},
		{"IPv6 fragment", v6(44), "ipv6-ext"},
		{"IPv6 destination options", v6(60), "ipv6-ext"},
		{"IPv6 no next header", v6(59), "ipv6-ext"},
		{"IPv6 mobility", v6(135), "ipv6-ext"},
		{"IPv6 AH", v6(51), "esp-ah"},
	}
	for _, c := range cases {
		if d := e.explainFrame(c.frame, e.lan); d.ReasonName != c.reason {
			t.Errorf("%s: explain says %s, want %s", c.name, d.ReasonName, c.reason)
		}
		want := uint32(XDPPass)
		if c.reason == "forward-out" {
			want = XDPRedirect
		}
		if ret := e.liveFrame(c.frame, e.lan); ret != want {
			t.Errorf("%s: live program %s, want %s", c.name, ActionName(ret), ActionName(want))
		}
	}
}

// liveFrame runs the live program once on a raw frame.
func (e *testEnv) liveFrame(frame []byte, ingress int) uint32 {
	e.t.Helper()
	var ret uint32
	var err error
	e.in(func() {
		ret, err = e.dp.objs.XdpFastpath.Run(&ebpf.RunOptions{Data: frame,
			Context: xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ingress)}})
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return ret
}

// TestDeviceMissAnnounced: the policies the program hands to the kernel
// for their device are listed by Compile and logged by the mirror once
// each, with the fix: the kernel's own path sends them to the same
// device, so the configuration leaks whatever XDP does (issue 31).
func TestDeviceMissAnnounced(t *testing.T) {
	const w = 7
	subnet := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.1.0/24", 100, "123.2.0.1", 1, w)
	exact := tunnelPolicy(xfrm.DirOut, "10.0.0.5/32", "48.0.2.9/32", 100, "123.2.0.2", 2, w)
	reqid0 := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.4.0/24", 100, "123.2.0.4", 4, w)
	sa0 := saFor(reqid0, w)
	reqid0.Tmpls[0].Reqid = 0
	snap := Snapshot{Policies: []xfrm.Policy{subnet, exact, reqid0},
		States: []xfrm.State{saFor(subnet, w), saFor(exact, w), sa0},
		Quirks: map[int]DeviceQuirks{w: {ExactSelectors: true}}}
	snap.RouteMTU = routeMTUs(snap.States, 1500)
	tables, err := Compile(snap)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range tables.DeviceMisses {
		got = append(got, d.Policy.Sel.Dst.String())
	}
	if strings.Join(got, " ") != "48.0.1.0/24 48.0.4.0/24" || tables.DeviceMisses[0].Ifindex != w {
		t.Fatalf("device misses %v (%+v), want the subnet and the reqid-0 policies on ifindex %d", got, tables.DeviceMisses, w)
	}
	var log bytes.Buffer
	m := &Mirror{Log: slog.New(slog.NewTextHandler(&log, nil))}
	m.announceDeviceMisses(tables.DeviceMisses)
	m.announceDeviceMisses(tables.DeviceMisses) // the next generation: no repeat
	out := log.String()
	if n := strings.Count(out, "this policy leaks on its offload device"); n != 2 {
		t.Errorf("%d announcements, want 2 (once per policy):\n%s", n, out)
	}
	for _, want := range []string{`policy="10.0.0.0/8 -> 48.0.1.0/24"`, "only 10.0.0.0 -> 48.0.1.0 is encrypted", "/32 or /128", "reqid 0", "driver-quirks"} {
		if !strings.Contains(out, want) {
			t.Errorf("the announcement lacks %q:\n%s", want, out)
		}
	}
}
