// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"

	"sluice/internal/kernel/xfrm"
)

// ipv4Of returns the IPv4 header of a frame (after an optional tag).
func ipv4Of(t *testing.T, frame []byte) []byte {
	t.Helper()
	off := 14
	if binary.BigEndian.Uint16(frame[12:]) == 0x8100 {
		off = 18
	}
	return frame[off : off+20]
}

func TestForwardRewritesHeaders(t *testing.T) {
	e := newTestEnv(t)
	g := newGateway(e)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	e.apply(g.snap)

	t.Run("fib mode: MACs from the route, TTL-1, valid checksum", func(t *testing.T) {
		d := e.explain(udp("10.0.0.5", "48.0.1.9", 64), e.lan)
		if d.Reason != ReasonForwardOut || d.EgressIfindex != uint32(e.wan) {
			t.Fatalf("got %s to %d, want forward-out to wan0 (%d)", d.ReasonName, d.EgressIfindex, e.wan)
		}
		if !bytes.Equal(d.Output[0:6], e.wanRtr) || !bytes.Equal(d.Output[6:12], e.wanMAC) {
			t.Fatalf("MACs dst=%s src=%s, want dst=%s (WAN router) src=%s (wan0)",
				net.HardwareAddr(d.Output[0:6]), net.HardwareAddr(d.Output[6:12]), e.wanRtr, e.wanMAC)
		}
		h := ipv4Of(t, d.Output)
		if h[8] != 63 {
			t.Fatalf("TTL %d, want 63", h[8])
		}
		if c := checksum(h, 0); c != 0 {
			t.Fatalf("IPv4 header checksum does not verify (residue %#x)", c)
		}
	})
	t.Run("IPv6: hop limit decremented", func(t *testing.T) {
		d := e.explain(udp("fd00::5", "2001:db8:48:1::9", 2), e.lan)
		if d.Reason != ReasonForwardOut {
			t.Fatalf("got %s", d.ReasonName)
		}
		if hl := d.Output[14+7]; hl != 1 {
			t.Fatalf("hop limit %d, want 1", hl)
		}
	})
	t.Run("nic mode: the NIC writes L2, sluice leaves the MACs alone", func(t *testing.T) {
		e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2NIC})
		defer e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
		in := udp("10.0.0.5", "48.0.1.9", 64)
		frame, _ := in.Marshal()
		d := e.explain(in, e.lan)
		if d.Reason != ReasonForwardOut || !bytes.Equal(d.Output[:12], frame[:12]) {
			t.Fatalf("got %s, MACs %x, want forward-out with MACs %x", d.ReasonName, d.Output[:12], frame[:12])
		}
	})
	t.Run("tagged ingress on a VLAN child: tag popped toward the untagged WAN", func(t *testing.T) {
		// lan1 plays the VLAN child lan0.100 (the host kernel has no 802.1Q; the VM test uses a real one).
		e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB},
			Iface{Ifindex: e.lan1, L2: L2FIB, VLANID: 100, ParentIfindex: e.lan})
		defer e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
		p := udp("10.9.0.5", "48.0.1.9", 64)
		p.VLAN = 100
		d := e.explain(p, e.lan)
		if d.Reason != ReasonForwardOut {
			t.Fatalf("got %s", d.ReasonName)
		}
		if et := binary.BigEndian.Uint16(d.Output[12:]); et != 0x0800 {
			t.Fatalf("EtherType %#x after forwarding, want 0x0800 (tag popped)", et)
		}
		if h := ipv4Of(t, d.Output); h[8] != 63 || checksum(h, 0) != 0 {
			t.Fatalf("IPv4 header after pop: ttl %d checksum residue %#x", h[8], checksum(h, 0))
		}
	})
}

func TestInboundForwardingIsOptIn(t *testing.T) {
	e := newTestEnv(t)
	g := newGateway(e)
	e.apply(g.snap)
	spoof := udp("48.0.1.7", "10.1.0.5", 64)

	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	if d := e.explain(spoof, e.wan); d.Action != XDPPass || d.Reason != ReasonInbound {
		t.Fatalf("default: %s/%s, want XDP_PASS/inbound: the kernel's FWD check must decide", d.ActionName, d.ReasonName)
	}

	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB, InboundForward: true})
	d := e.explain(spoof, e.wan)
	if d.Reason != ReasonForwardIn || d.EgressIfindex != uint32(e.lan) {
		t.Fatalf("opted in: %s to %d, want forward-in to lan0", d.ReasonName, d.EgressIfindex)
	}
	if !bytes.Equal(d.Output[0:6], e.lanRtr) || !bytes.Equal(d.Output[6:12], e.lanMAC) {
		t.Fatalf("inbound MACs dst=%s src=%s", net.HardwareAddr(d.Output[0:6]), net.HardwareAddr(d.Output[6:12]))
	}

	// Opted in, but the IN policy's SA is offloaded on another port.
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB, InboundForward: true}, Iface{Ifindex: e.wan, L2: L2FIB})
	if d := e.explain(udp("48.0.1.7", "10.0.0.5", 64), e.lan); d.Action != XDPPass {
		t.Fatalf("SA offloaded on wan0 but packet on lan0: %s/%s, want XDP_PASS", d.ActionName, d.ReasonName)
	}

	// Hairpin next hop and a VLAN child egress: tag pushed, sent to the parent.
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB},
		Iface{Ifindex: e.lan1, L2: L2FIB, VLANID: 504, ParentIfindex: e.lan},
		Iface{Ifindex: e.wan, L2: L2FIB, InboundForward: true, HairpinIfindex: e.lan1,
			HairpinDstMAC: lanRouterMAC, HairpinSrcMAC: e.lanMAC})
	d = e.explain(spoof, e.wan)
	if d.Reason != ReasonForwardIn || d.EgressIfindex != uint32(e.lan) {
		t.Fatalf("hairpin via VLAN child: %s to %d, want forward-in to the parent lan0", d.ReasonName, d.EgressIfindex)
	}
	if binary.BigEndian.Uint16(d.Output[12:]) != 0x8100 || binary.BigEndian.Uint16(d.Output[14:])&0xfff != 504 ||
		binary.BigEndian.Uint16(d.Output[16:]) != 0x0800 {
		t.Fatalf("VLAN header % x, want 81 00 01 f8 08 00", d.Output[12:18])
	}
	if h := ipv4Of(t, d.Output); h[8] != 63 || checksum(h, 0) != 0 {
		t.Fatalf("IPv4 header after push: ttl %d checksum residue %#x", h[8], checksum(h, 0))
	}
}

func TestForwardedCleartextMustPassTheFwdCheck(t *testing.T) {
	e := newTestEnv(t)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	out := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.1.0/24", 100, "123.2.0.1", 1, e.wan)
	fwdOut := tunnelPolicy(xfrm.DirFwd, "10.0.0.0/8", "48.0.1.0/24", 100, "123.2.0.1", 1, 0)
	fwdOut.Tmpls[0].Optional = true // strongSwan's policies_fwd_out = yes
	base := Snapshot{Policies: []xfrm.Policy{out}, States: []xfrm.State{saFor(out, e.wan)}}
	pkt := udp("10.0.0.5", "48.0.1.9", 64)

	e.apply(base)
	if d := e.explain(pkt, e.lan); d.Reason != ReasonForwardOut {
		t.Fatalf("no FWD policy, default accept: %s, want forward-out", d.ReasonName)
	}
	withDefault := base
	withDefault.FwdDefaultBlock = true
	e.apply(withDefault)
	if d := e.explain(pkt, e.lan); d.Reason != ReasonFwdCheck {
		t.Fatalf("no FWD policy, default block: %s, want fwd-check", d.ReasonName)
	}
	withFwd := withDefault
	withFwd.Policies = append([]xfrm.Policy{fwdOut}, base.Policies...)
	e.apply(withFwd)
	if d := e.explain(pkt, e.lan); d.Reason != ReasonForwardOut {
		t.Fatalf("FWD allow with optional template: %s, want forward-out", d.ReasonName)
	}
	fwdOut.Tmpls[0].Optional = false
	withFwd.Policies[0] = fwdOut
	e.apply(withFwd)
	if d := e.explain(pkt, e.lan); d.Action != XDPPass {
		t.Fatalf("FWD policy requiring an SA: %s/%s, want XDP_PASS (the kernel drops cleartext)", d.ActionName, d.ReasonName)
	}
	// An SA that is not packet-offloaded (or has a second, software SA during rekey) keeps the kernel in charge.
	rekey := base
	rekey.States = append(rekey.States, saFor(out, 0))
	e.apply(rekey)
	if d := e.explain(pkt, e.lan); d.Reason != ReasonNotOffloaded {
		t.Fatalf("software SA beside the offloaded one: %s, want not-offloaded", d.ReasonName)
	}
}
