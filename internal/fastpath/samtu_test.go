// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"testing"

	"sluice/internal/kernel/xfrm"
)

// sized is a UDP packet of exactly l3 bytes from its IP header on.
func sized(src, dst string, l3 int) Packet {
	hdr := 20 + 8
	if addr(src).Is6() {
		hdr = 40 + 8
	}
	return Packet{Src: addr(src), Dst: addr(dst), Proto: 17, SPort: 1234, DPort: 5678, TTL: 64, Payload: l3 - hdr}
}

// TestSAMTU: the program forwards a packet only when it fits the MTU of
// the SA it goes through, xfrm_state_mtu of the route under the SA, as the
// kernel's bundle has it; above it the kernel gets the packet (and sends
// frag-needed / packet-too-big or fragments). The route MTUs are read from
// the kernel of the test namespace, so a locked route MTU counts. Before
// the post-SA check, every size up to the link's 1500 was forwarded.
func TestSAMTU(t *testing.T) {
	e := newTestEnv(t)
	w := e.wan
	ip(t, "-n", e.name, "route", "add", "49.0.0.0/8", "via", "123.0.0.254")
	ip(t, "-n", e.name, "route", "add", "123.2.0.0/16", "via", "123.0.0.254") // to the IPv4 peer
	ip(t, "-n", e.name, "route", "add", "2001:db8:49::/48", "via", "2001:db8:f::fe")
	v4 := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.0.0/8", 1, "123.2.0.9", 1, w)
	v6 := tunnelPolicy(xfrm.DirOut, "fd00::/16", "2001:db8:48::/48", 1, "2001:db8:f::9", 2, w)
	mixed := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "49.0.0.0/8", 1, "2001:db8:f::8", 3, w) // IPv4 in IPv6
	mixedSA := saFor(mixed, w)
	mixedSA.Sel = xfrm.Selector{Src: pfx("0.0.0.0/0"), Dst: pfx("0.0.0.0/0")} // an IPv6 SA carries IPv4 only with an IPv4 selector
	snap := Snapshot{Policies: []xfrm.Policy{v4, v6, mixed}, States: []xfrm.State{saFor(v4, w), saFor(v6, w), mixedSA}}
	apply := func() {
		t.Helper()
		s := snap
		e.in(func() { FillRouteMTU(&s, nil) })
		e.apply(s)
	}
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: w, L2: L2FIB},
		Iface{Ifindex: e.lan1, L2: L2FIB, VLANID: 100, ParentIfindex: e.lan})
	apply()
	vlan := 0
	check := func(name, src, dst string, mtu int) {
		t.Helper()
		for _, l3 := range []int{mtu - 1, mtu, mtu + 1} {
			want, reason := uint32(XDPRedirect), "forward-out"
			if l3 > mtu {
				want, reason = XDPPass, "sa-mtu"
			}
			p := sized(src, dst, l3)
			p.VLAN = uint16(vlan)
			if d := e.explain(p, e.lan); d.ReasonName != reason {
				t.Errorf("%s, %d bytes: explain says %s, want %s", name, l3, d.ReasonName, reason)
			}
			// twice: the second answer comes from the flow cache
			for i := 0; i < 2; i++ {
				if ret, _ := e.liveRun(p, e.lan); ret != want {
					t.Errorf("%s, %d bytes, run %d: %s, want %s", name, l3, i, ActionName(ret), ActionName(want))
				}
			}
		}
	}
	// kernel figures at 1500: 1446 (IPv4 outer), 1426 (IPv6 outer)
	check("IPv4 in IPv4", "10.0.0.5", "48.0.1.9", 1446)
	check("IPv6 in IPv6", "fd00:a::5", "2001:db8:48::9", 1426)
	check("IPv4 in IPv6", "10.0.0.5", "49.0.1.9", 1426)
	vlan = 100 // a tagged ingress (VLAN child lan1): the same limit
	check("IPv4 in IPv4, VLAN 100", "10.9.0.5", "48.0.1.9", 1446)
	vlan = 0

	// A larger packet of a cached flow is never replayed past the SA.
	small, big := sized("10.0.0.6", "48.0.1.9", 100), sized("10.0.0.6", "48.0.1.9", 1447)
	e.liveRun(small, e.lan)
	if ret, _ := e.liveRun(big, e.lan); ret != XDPPass {
		t.Errorf("1447 bytes after a cached 100: %s, want XDP_PASS", ActionName(ret))
	}

	// A locked route MTU under the SA (and the IPv6 device MTU) count.
	ip(t, "-n", e.name, "route", "add", "123.2.0.9/32", "via", "123.0.0.254", "mtu", "lock", "1400")
	// (an SA whose peer has no route at all is covered by TestSAMTUNoRoute)
	ip(t, "-n", e.name, "-6", "route", "add", "2001:db8:f::9/128", "dev", "wan0", "mtu", "1300")
	apply()
	check("IPv4 in IPv4 over a locked 1400", "10.0.0.5", "48.0.1.9", 1346)
	check("IPv6 in IPv6 over a 1300 route", "fd00:a::5", "2001:db8:48::9", 1226)
	check("IPv4 in IPv6, route unchanged", "10.0.0.5", "49.0.1.9", 1426)

	// The route to the peer leaves through another device than the SA's
	// offload device: the kernel drops (xfrm_dev_offload_ok), the program
	// forwards nothing through the SA.
	ip(t, "-n", e.name, "route", "replace", "123.2.0.9/32", "via", "10.0.0.1")
	apply()
	if d := e.explain(sized("10.0.0.5", "48.0.1.9", 100), e.lan); d.ReasonName != "sa-mtu" {
		t.Errorf("route to the peer off the offload device: %s, want sa-mtu", d.ReasonName)
	}

	// An IPv6 SA without an IPv4 selector carries no IPv4: the kernel
	// finds no state for the flow (XfrmOutNoStates, measured in the VM).
	bare := snap
	bare.States = append([]xfrm.State(nil), snap.States...)
	bare.States[2].Sel = xfrm.Selector{}
	e.in(func() { FillRouteMTU(&bare, nil) })
	e.apply(bare)
	if d := e.explain(sized("10.0.0.5", "49.0.1.9", 100), e.lan); d.ReasonName != "not-offloaded" {
		t.Errorf("IPv4 through an IPv6 SA without a selector: %s, want not-offloaded", d.ReasonName)
	}

	// An SA whose algorithm sluice cannot size forwards nothing.
	odd := snap
	odd.States = append([]xfrm.State(nil), snap.States...)
	odd.States[0].Alg = xfrm.StateAlg{AEAD: "rfc9999(new)", ICVBits: 128}
	e.in(func() { FillRouteMTU(&odd, nil) })
	e.apply(odd)
	if d := e.explain(sized("10.0.0.5", "48.0.1.9", 100), e.lan); d.ReasonName != "sa-mtu" {
		t.Errorf("unknown algorithm: %s, want sa-mtu", d.ReasonName)
	}
}

// TestSAMTUNoRoute: without a route to the SA's peer the kernel cannot
// send through the SA (xfrm_lookup fails); the program forwards nothing.
func TestSAMTUNoRoute(t *testing.T) {
	e := newTestEnv(t)
	p := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.0.0/8", 1, "198.18.0.9", 1, e.wan)
	s := Snapshot{Policies: []xfrm.Policy{p}, States: []xfrm.State{saFor(p, e.wan)}}
	e.in(func() { FillRouteMTU(&s, nil) })
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	e.apply(s)
	if d := e.explain(sized("10.0.0.5", "48.0.1.9", 100), e.lan); d.ReasonName != "sa-mtu" {
		t.Errorf("no route to the peer: %s, want sa-mtu", d.ReasonName)
	}
}
