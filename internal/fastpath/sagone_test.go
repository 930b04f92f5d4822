// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"fmt"
	"testing"

	"sluice/internal/kernel/xfrm"
)

// heldSA makes the kernel of the test's namespace hold an SA with st's
// destination, SPI and protocol. The host kernel has no ESP type, so it
// cannot hold a real ESP SA; an SPI reserved with XFRM_MSG_ALLOCSPI is a
// larval state in the same SPI table (state_byspi), which
// bpf_xdp_get_xfrm_state finds the same way. It returns what deletes it.
func (e *testEnv) heldSA(st xfrm.State) (del func()) {
	e.t.Helper()
	spi := fmt.Sprintf("0x%x", st.SPI)
	ip(e.t, "netns", "exec", e.name, "sysctl", "-qw", "net.core.xfrm_acq_expires=3600")
	ip(e.t, "-n", e.name, "xfrm", "state", "allocspi", "src", st.Src.String(), "dst", st.Dst.String(),
		"proto", "esp", "mode", "tunnel", "min", spi, "max", spi)
	return func() {
		e.t.Helper()
		ip(e.t, "-n", e.name, "xfrm", "state", "delete", "src", st.Src.String(), "dst", st.Dst.String(), "proto", "esp", "spi", spi)
	}
}

// TestSAGoneClosesTheDeletionWindow: with the SA check on, an outbound
// forward needs the kernel to hold the policy's SA at the moment of the
// packet, so the first packet after the kernel deleted it is passed
// (sa-gone) although the mirror has not been told yet (no new tables
// here): the full decision and the cached forward both ask. During a
// rekey either SA is enough. Without the check the window is open: the
// cached forward goes on.
func TestSAGoneClosesTheDeletionWindow(t *testing.T) {
	e := newTestEnv(t)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	pol := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.1.0/24", 100, "123.2.0.1", 1, e.wan)
	pol6 := tunnelPolicy(xfrm.DirOut, "fd00::/16", "2001:db8:48:1::/64", 100, "2001:db8:f::99", 2, e.wan)
	old, old6 := saFor(pol, e.wan), saFor(pol6, e.wan)
	rekeyed := old
	rekeyed.SPI += 0x100
	snap := Snapshot{Policies: []xfrm.Policy{pol, pol6}, States: []xfrm.State{old, rekeyed, old6}}
	snap.RouteMTU = routeMTUs(snap.States, 1500)
	e.apply(snap)
	if err := e.dp.SetSACheck(SACheckKernel); err != nil {
		t.Fatal(err)
	}
	a, b := udp("10.0.0.5", "48.0.1.9", 64), udp("fd00::5", "2001:db8:48:1::9", 64)

	// No SA in the kernel yet: nothing is forwarded.
	e.expectLive(a, e.lan, XDPPass, ReasonSAGone)
	if d := e.explain(b, e.lan); d.ReasonName != "sa-gone" {
		t.Fatalf("IPv6 without its SA: %s, want sa-gone", d.ReasonName)
	}

	delOld, delNew, del6 := e.heldSA(old), e.heldSA(rekeyed), e.heldSA(old6)
	e.expectLive(a, e.lan, XDPRedirect, ReasonForwardOut) // the full decision, fills the cache
	_, fills := e.cacheStats()
	e.expectLive(a, e.lan, XDPRedirect, ReasonForwardOut) // the cached forward
	if hits, f := e.cacheStats(); hits == 0 || f != fills {
		t.Fatalf("the second packet was not a cache hit (hits %d, fills %d -> %d)", hits, fills, f)
	}
	e.expectLive(b, e.lan, XDPRedirect, ReasonForwardOut)

	// A rekey: the old SA goes, the new one carries the policy.
	delOld()
	e.expectLive(a, e.lan, XDPRedirect, ReasonForwardOut)
	// The last SA goes: the cached forward is refused at once.
	hits, _ := e.cacheStats()
	delNew()
	e.expectLive(a, e.lan, XDPPass, ReasonSAGone)
	if h, _ := e.cacheStats(); h != hits {
		t.Fatalf("the refused packet was counted as a cache hit")
	}
	if d := e.explain(a, e.lan); d.ReasonName != "sa-gone" || d.Action != XDPPass {
		t.Fatalf("explain after the delete: %s/%s, want sa-gone/XDP_PASS", d.ActionName, d.ReasonName)
	}
	del6()
	e.expectLive(b, e.lan, XDPPass, ReasonSAGone)

	// Without the check, the cached forward outlives the SA: the window
	// the check closes.
	if err := e.dp.SetSACheck(SACheckOff); err != nil {
		t.Fatal(err)
	}
	e.expectLive(a, e.lan, XDPRedirect, ReasonForwardOut)
}

// TestSAWithdrawnOnTheKernelsDelete: under the gateway's default check
// (SACheckMirror) the mirror takes a deleted SA out of the program as
// soon as it applies the kernel's event, before any new tables: the
// cached forward of a policy left without an SA is passed (sa-gone) from
// the next packet on; one whose rekeyed SA remains goes on. A hard expire
// and a flush withdraw too.
func TestSAWithdrawnOnTheKernelsDelete(t *testing.T) {
	e := newTestEnv(t)
	e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
	pol := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.1.0/24", 100, "123.2.0.1", 1, e.wan)
	other := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.2.0/24", 100, "123.2.0.2", 2, e.wan)
	old, otherSA := saFor(pol, e.wan), saFor(other, e.wan)
	rekeyed := old
	rekeyed.SPI += 0x100
	snap := Snapshot{Policies: []xfrm.Policy{pol, other}, States: []xfrm.State{old, rekeyed, otherSA}}
	snap.RouteMTU = routeMTUs(snap.States, 1500)
	e.apply(snap)
	if err := e.dp.SetSACheck(SACheckMirror); err != nil {
		t.Fatal(err)
	}
	a, b := udp("10.0.0.5", "48.0.1.9", 64), udp("10.0.0.5", "48.0.2.9", 64)
	e.expectLive(a, e.lan, XDPRedirect, ReasonForwardOut)
	e.expectLive(a, e.lan, XDPRedirect, ReasonForwardOut) // cached
	e.expectLive(b, e.lan, XDPRedirect, ReasonForwardOut)

	m := &Mirror{DP: e.dp}
	m.copy.load(snap)
	del := old
	m.applyEvent(xfrm.Event{Kind: xfrm.StateDel, State: &del})
	e.expectLive(a, e.lan, XDPRedirect, ReasonForwardOut) // the rekeyed SA carries it
	exp := rekeyed
	m.applyEvent(xfrm.Event{Kind: xfrm.StateExpire, Hard: true, State: &exp})
	e.expectLive(a, e.lan, XDPPass, ReasonSAGone)
	if d := e.explain(a, e.lan); d.ReasonName != "sa-gone" {
		t.Fatalf("explain after the hard expire: %s, want sa-gone", d.ReasonName)
	}
	e.expectLive(b, e.lan, XDPRedirect, ReasonForwardOut) // another policy's SA is not touched

	m.applyEvent(xfrm.Event{Kind: xfrm.StateFlush, State: &xfrm.State{}})
	e.expectLive(b, e.lan, XDPPass, ReasonSAGone)

	// New tables that still hold the SAs (the kernel re-added them)
	// name them again.
	e.apply(snap)
	e.expectLive(b, e.lan, XDPRedirect, ReasonForwardOut)
}
