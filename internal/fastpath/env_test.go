// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
	"sluice/internal/testutil"
)

// testEnv is a gateway namespace with real routes and neighbours, so the
// program's FIB lookups answer as they would on a gateway:
//
//	lan0 10.0.0.254/24, fd00:a::fe/64   -> 10.0.0.0/8, fd00::/16 via the LAN router (10.0.0.1)
//	wan0 123.0.0.1/16, 2001:db8:f::1/64 -> 48.0.0.0/8, 2001:db8:48::/48 via the WAN router
//	lan1 (stands in for a VLAN child on hosts without 802.1Q)
type testEnv struct {
	t              *testing.T
	ns             netns.NsHandle
	name           string
	lan, wan, lan1 int
	lanMAC, wanMAC net.HardwareAddr
	lanRtr, wanRtr net.HardwareAddr
	dp             *Datapath
}

var (
	lanRouterMAC = net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 1}
	wanRouterMAC = net.HardwareAddr{0x02, 0xbb, 0, 0, 0, 1}
)

func ip(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func newTestEnv(t *testing.T) *testEnv {
	testutil.RequireRoot(t, "loads BPF programs and creates network namespaces")
	name, _ := testutil.NewNetNS(t)
	n := func(args ...string) { ip(t, append([]string{"-n", name}, args...)...) }
	for _, l := range []string{"lan0", "wan0", "lan1"} {
		n("link", "add", l, "type", "veth", "peer", "name", l+"p")
		// The address frames built by Packet carry by default, so test
		// frames are sent to the interface (the program forwards only
		// those, as the kernel does).
		n("link", "set", l, "address", defaultDstMAC.String())
		n("link", "set", l, "up")
		n("link", "set", l+"p", "up")
	}
	n("addr", "add", "10.0.0.254/24", "dev", "lan0")
	n("addr", "add", "fd00:a::fe/64", "dev", "lan0", "nodad")
	n("addr", "add", "123.0.0.1/16", "dev", "wan0")
	n("addr", "add", "2001:db8:f::1/64", "dev", "wan0", "nodad")
	n("addr", "add", "10.9.0.254/24", "dev", "lan1")
	n("neigh", "add", "10.0.0.1", "lladdr", lanRouterMAC.String(), "dev", "lan0", "nud", "permanent")
	n("neigh", "add", "fd00:a::1", "lladdr", lanRouterMAC.String(), "dev", "lan0", "nud", "permanent")
	n("neigh", "add", "123.0.0.254", "lladdr", wanRouterMAC.String(), "dev", "wan0", "nud", "permanent")
	n("neigh", "add", "2001:db8:f::fe", "lladdr", wanRouterMAC.String(), "dev", "wan0", "nud", "permanent")
	n("route", "add", "10.0.0.0/8", "via", "10.0.0.1")
	n("route", "add", "fd00::/16", "via", "fd00:a::1")
	n("route", "add", "48.0.0.0/8", "via", "123.0.0.254")
	n("route", "add", "2001:db8:48::/48", "via", "2001:db8:f::fe")
	exec.Command("ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1").Run()

	ns, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	e := &testEnv{t: t, ns: ns, name: name, lanRtr: lanRouterMAC, wanRtr: wanRouterMAC}
	e.in(func() {
		for _, c := range []struct {
			name string
			idx  *int
			mac  *net.HardwareAddr
		}{{"lan0", &e.lan, &e.lanMAC}, {"wan0", &e.wan, &e.wanMAC}, {"lan1", &e.lan1, nil}} {
			ifc, err := net.InterfaceByName(c.name)
			if err != nil {
				t.Fatal(err)
			}
			*c.idx = ifc.Index
			if c.mac != nil {
				*c.mac = ifc.HardwareAddr
			}
		}
		dp, err := Load(LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e.dp = dp
		// As the daemon does: FIB answers reused per destination while
		// the namespace's FIB allows it (it does here), so every test
		// of the program runs with the FIB result cache on.
		on, _ := kernel.FIBByDestination()
		if _, err := dp.SetFIBDstOnly(on); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { e.dp.Close() })
	return e
}

// in runs fn inside the environment's namespace on a locked thread.
func (e *testEnv) in(fn func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		e.t.Fatal(err)
	}
	defer orig.Close()
	if err := netns.Set(e.ns); err != nil {
		e.t.Fatal(err)
	}
	defer netns.Set(orig)
	fn()
}

// routeOf is the egress of the environment's route to a: the LAN for
// 10.0.0.0/8 and fd00::/16, else the WAN.
func (e *testEnv) routeOf(a netip.Addr) int {
	if pfx("10.0.0.0/8").Contains(a) || pfx("fd00::/16").Contains(a) {
		return e.lan
	}
	return e.wan
}

func (e *testEnv) setIfaces(ifs ...Iface) {
	e.t.Helper()
	e.in(func() {
		if err := e.dp.SetIfaces(ifs); err != nil {
			e.t.Fatal(err)
		}
	})
}

func (e *testEnv) apply(s Snapshot) {
	e.t.Helper()
	if s.RouteMTU == nil {
		s.RouteMTU = routeMTUs(s.States, 1500) // unless the test says otherwise
	}
	tb, err := Compile(s)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.dp.Apply(tb); err != nil {
		e.t.Fatal(err)
	}
}

func (e *testEnv) explain(p Packet, ingress int) *Decision {
	e.t.Helper()
	frame, err := p.Marshal()
	if err != nil {
		e.t.Fatal(err)
	}
	return e.explainFrame(frame, ingress)
}

func (e *testEnv) explainFrame(frame []byte, ingress int) *Decision {
	e.t.Helper()
	var d *Decision
	var err error
	e.in(func() {
		d, err = e.dp.Explain(frame, ingress)
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// Policy-building shorthands for tests.
func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

var nextIndex uint32 = 8

// outPolicy is an OUT allow policy with one tunnel-mode ESP template to the
// given peer; offloadDev != 0 makes it (and the matching SA) packet-offloaded.
func tunnelPolicy(dir xfrm.Dir, src, dst string, prio uint32, peer string, reqid uint32, offloadDev int) xfrm.Policy {
	nextIndex += 8
	p := xfrm.Policy{
		Index: nextIndex | uint32(dir), Dir: dir, Priority: prio, Action: xfrm.ActionAllow,
		Sel:   xfrm.Selector{Src: pfx(src), Dst: pfx(dst)},
		Tmpls: []xfrm.Tmpl{{Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, Reqid: reqid}},
	}
	local := addr("123.0.0.1")
	if addr(peer).Is6() {
		local = addr("2001:db8:f::1")
	}
	if dir == xfrm.DirOut {
		p.Tmpls[0].Src, p.Tmpls[0].Dst = local, addr(peer)
	} else {
		p.Tmpls[0].Src, p.Tmpls[0].Dst = addr(peer), local
	}
	if offloadDev != 0 {
		p.Offload = &xfrm.Offload{Ifindex: offloadDev, Flags: xfrm.OffloadPacket}
		if dir != xfrm.DirOut {
			p.Offload.Flags |= xfrm.OffloadInbound
		}
	}
	return p
}

// gcm128 is strongSwan's esp=aes128gcm16.
var gcm128 = xfrm.StateAlg{AEAD: "rfc4106(gcm(aes))", ICVBits: 128}

func saFor(p xfrm.Policy, offloadDev int) xfrm.State {
	tm := p.Tmpls[0]
	st := xfrm.State{Src: tm.Src, Dst: tm.Dst, Proto: xfrm.ProtoESP, SPI: 0x1000 + p.Index, Reqid: tm.Reqid, Mode: xfrm.ModeTunnel, Alg: gcm128}
	if offloadDev != 0 {
		st.Offload = &xfrm.Offload{Ifindex: offloadDev, Flags: xfrm.OffloadPacket}
		if p.Dir != xfrm.DirOut {
			st.Offload.Flags |= xfrm.OffloadInbound
		}
	}
	return st
}

// bpffsDir mounts a private bpffs for a test's pins (what a daemon pins
// and another process adopts) and unmounts it when the test ends.
func bpffsDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		t.Fatalf("mounting a bpffs for the pins: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}
