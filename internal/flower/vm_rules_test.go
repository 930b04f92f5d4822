// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"sluice/internal/fastpath"
	"sluice/internal/flower"
	"sluice/internal/kernel/tcflower"
	"sluice/internal/kernel/xfrm"
)

// flowerTunnel returns strongSwan's OUT and fwd-out policies for src->dst
// and the outbound SA, packet-offloaded on dev (a snapshot as the mirror
// would hold it: the VM has no packet offload, so the SA exists only here).
func flowerTunnel(index uint32, src, dst string, dev int) ([]xfrm.Policy, []xfrm.State) {
	local, peer := netip.MustParseAddr("123.0.0.1"), netip.MustParseAddr("123.0.0.2")
	tm := xfrm.Tmpl{Src: local, Dst: peer, Proto: 50, Mode: 1, Reqid: index}
	out := xfrm.Policy{Index: index, Dir: xfrm.DirOut, Priority: 100,
		Sel:     xfrm.Selector{Src: netip.MustParsePrefix(src), Dst: netip.MustParsePrefix(dst)},
		Tmpls:   []xfrm.Tmpl{tm},
		Offload: &xfrm.Offload{Ifindex: dev, Flags: xfrm.OffloadPacket}}
	fwd := out
	fwd.Index, fwd.Dir, fwd.Offload = index+1, xfrm.DirFwd, nil
	opt := tm
	opt.Optional = true
	fwd.Tmpls = []xfrm.Tmpl{opt}
	// The SA's selector is the policy's, as strongSwan installs it: an
	// IPv4 SA carries IPv6 only with an IPv6 selector (xfrm_state_find).
	sa := xfrm.State{Src: local, Dst: peer, Proto: 50, SPI: 0x1000 + index, Reqid: index, Mode: 1,
		Offload: &xfrm.Offload{Ifindex: dev, Flags: xfrm.OffloadPacket}, Sel: out.Sel}
	return []xfrm.Policy{out, fwd}, []xfrm.State{sa}
}

// listenUDP opens a UDP socket inside ns and returns a function that
// counts the datagrams received until a quiet second.
func listenUDP(t *testing.T, ns, addr string) func() int {
	t.Helper()
	var c net.PacketConn
	inNetns(t, ns, func() {
		var err error
		if c, err = net.ListenPacket("udp", addr); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { c.Close() })
	return func() int {
		n := 0
		buf := make([]byte, 2048)
		for {
			c.SetReadDeadline(time.Now().Add(time.Second))
			if _, _, err := c.ReadFrom(buf); err != nil {
				return n
			}
			n++
		}
	}
}

// flowerLab is seed 004's port layout in namespaces: lan host `a` sends
// cleartext tagged with VLAN 502 to the gateway's p0 (p0.502 is the VLAN
// child); the gateway's wan0 leads to `b`, which owns 48.0.0.1 and
// 2001:db8:48::1. The gateway does not forward in software (forwarding
// off, no XDP): only flower rules move packets from p0 to wan0.
type flowerLab struct {
	a, gw, b       string
	p0, p0vl, wan  int
	gwWanMAC, bMAC net.HardwareAddr
	router         staticRouter
	ports          []flower.Port
	snap           fastpath.Snapshot
}

func newFlowerLab(t *testing.T, l *lab) *flowerLab {
	t.Helper()
	f := &flowerLab{}
	step(t, "topology", func(t *testing.T) {
		f.a, f.gw, f.b = l.netns(t), l.netns(t), l.netns(t)
		veth(t, f.a, "lan", "", f.gw, "p0", "")
		veth(t, f.gw, "wan0", "123.0.0.1/24", f.b, "wan0", "123.0.0.2/24")
		run(t, "ip", "-n", f.a, "link", "add", "link", "lan", "name", "lan.502", "type", "vlan", "id", "502")
		run(t, "ip", "-n", f.gw, "link", "add", "link", "p0", "name", "p0.502", "type", "vlan", "id", "502")
		for _, e := range [][3]string{{f.a, "lan.502", "10.0.0.1/24"}, {f.gw, "p0.502", "10.0.0.254/24"}} {
			run(t, "ip", "-n", e[0], "addr", "add", e[2], "dev", e[1])
			run(t, "ip", "-n", e[0], "addr", "add", strings.Replace(strings.Replace(e[2], "10.0.0.", "2001:db8:16::", 1), "/24", "/64", 1), "dev", e[1], "nodad")
			run(t, "ip", "-n", e[0], "link", "set", e[1], "up")
		}
		run(t, "ip", "-n", f.a, "route", "add", "48.0.0.0/8", "via", "10.0.0.254")
		run(t, "ip", "-n", f.a, "route", "add", "2001:db8:48::/48", "via", "2001:db8:16::254")
		run(t, "ip", "-n", f.b, "addr", "add", "48.0.0.1/32", "dev", "lo")
		run(t, "ip", "-n", f.b, "addr", "add", "2001:db8:48::1/128", "dev", "lo")
		nsRun(t, f.gw, "sysctl", "-qw", "net.ipv4.ip_forward=0", "net.ipv6.conf.all.forwarding=0")
		// a resolves the gateway's MAC the ordinary way.
		nsRun(t, f.a, "ping", "-c", "1", "-W", "3", "10.0.0.254")
		nsRun(t, f.a, "ping", "-c", "1", "-W", "3", "2001:db8:16::254")
		f.p0, _ = link(t, f.gw, "p0")
		var vlMAC net.HardwareAddr
		f.p0vl, vlMAC = link(t, f.gw, "p0.502")
		f.wan, f.gwWanMAC = link(t, f.gw, "wan0")
		_, f.bMAC = link(t, f.b, "wan0")
		nh := flower.NextHop{Ifindex: f.wan, Name: "wan0", DstMAC: f.bMAC, SrcMAC: f.gwWanMAC, MTU: 1500}
		f.router = staticRouter{netip.MustParsePrefix("48.0.0.0/8"): nh, netip.MustParsePrefix("2001:db8:48::/48"): nh}
		f.ports = []flower.Port{
			{Name: "p0.502", Ifindex: f.p0vl, MAC: vlMAC, ParentIfindex: f.p0, ParentName: "p0", VLANID: 502, Outbound: true, TTL: true},
			{Name: "wan0", Ifindex: f.wan, L2FIB: true},
		}
		p4, s4 := flowerTunnel(10, "10.0.0.0/24", "48.0.0.0/16", f.wan)
		p6, s6 := flowerTunnel(20, "2001:db8:16::/64", "2001:db8:48::/48", f.wan)
		f.snap = withRouteMTU(fastpath.Snapshot{Policies: append(p4, p6...), States: append(s4, s6...)})
	})
	step(t, "clsact on the ports", func(t *testing.T) {
		run(t, "tc", "-n", f.gw, "qdisc", "add", "dev", "p0", "clsact")
		run(t, "tc", "-n", f.b, "qdisc", "add", "dev", "wan0", "clsact")
		// What b receives through the rules: untagged, MACs rewritten,
		// TTL / hop limit 63 (a sends 64).
		for _, pr := range []struct{ pref, proto string }{{"10", "ip"}, {"11", "ipv6"}} {
			run(t, "tc", "-n", f.b, "filter", "add", "dev", "wan0", "ingress", "protocol", pr.proto, "pref", pr.pref,
				"flower", "skip_hw", "dst_mac", f.bMAC.String(), "src_mac", f.gwWanMAC.String(), "ip_proto", "udp", "ip_ttl", "63", "action", "pass")
		}
	})
	return f
}

func (f *flowerLab) derive() flower.Result {
	return flower.Derive(flower.Input{Views: fastpath.PolicyViews(f.snap), Ports: f.ports, Router: f.router, InboundChain: 1})
}

func TestFlowerRulesOnPackets(t *testing.T) {
	l := newLab(t)
	f := newFlowerLab(t, l)
	var fs *tcflower.FlowerSocket
	inst := &flower.Installer{SkipHW: true}
	var res flower.Result
	step(t, "derive", func(t *testing.T) {
		res = f.derive()
		if len(res.Rules) != 6 || len(res.Skips) != 0 {
			t.Fatalf("want 2 forwards and 4 guards, got %d rules, skips %v:\n%v", len(res.Rules), res.Skips, res.Rules)
		}
	})
	inNetns(t, f.gw, func() {
		var err error
		if fs, err = tcflower.OpenFlowerSocket(); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { fs.Close() })
	inst.FS = fs
	step(t, "veth refuses skip_sw: production rules never run in software", func(t *testing.T) {
		p := flower.Probe(fs, f.p0, 0)
		if p.OK {
			t.Fatal("a veth accepted a skip_sw rule")
		}
		t.Logf("probe: %s", p.Msg)
		if out := run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress"); strings.TrimSpace(out) != "" {
			t.Fatalf("the refused probe left a filter:\n%s", out)
		}
	})
	step(t, "install (lab: skip_hw)", func(t *testing.T) {
		st, errs, err := inst.Apply(res.Rules)
		if err != nil || len(errs) != 0 || st.Added != 6 {
			t.Fatalf("apply: %+v %v %v", st, errs, err)
		}
		out := run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress")
		mustContain(t, out, "skip_hw", "vlan_id 502", "dst_mac", "pedit", "csum", "police", "vlan", "pop", "mirred (Egress Redirect to device wan0)")
		if strings.Contains(out, "skip_sw") {
			t.Fatalf("lab rules must be skip_hw only:\n%s", out)
		}
	})
	recv4 := listenUDP(t, f.b, "48.0.0.1:9999")
	recv6 := listenUDP(t, f.b, "[2001:db8:48::1]:9999")
	step(t, "IPv4: VLAN popped, TTL 63, MACs rewritten, valid checksum, out of wan0", func(t *testing.T) {
		sendUDP(t, f.a, netip.MustParseAddr("48.0.0.1"), 9999, 64, 3)
		if n := recv4(); n != 3 {
			t.Fatalf("b's socket received %d of 3 (a bad IP checksum is dropped by b's kernel)\n%s", n,
				run(t, "tc", "-n", f.gw, "-s", "filter", "show", "dev", "p0", "ingress"))
		}
		if n := pktCount(t, f.b, "wan0", "10"); n != 3 {
			t.Fatalf("b counted %d untagged TTL-63 packets from the gateway's MAC, want 3", n)
		}
	})
	step(t, "IPv6: hop limit 63", func(t *testing.T) {
		sendUDP(t, f.a, netip.MustParseAddr("2001:db8:48::1"), 9999, 64, 3)
		if n := recv6(); n != 3 {
			t.Fatalf("b received %d of 3", n)
		}
		if n := pktCount(t, f.b, "wan0", "11"); n != 3 {
			t.Fatalf("b counted %d hop-limit-63 packets, want 3", n)
		}
	})
	step(t, "TTL 1 goes to the host, not out of wan0", func(t *testing.T) {
		sendUDP(t, f.a, netip.MustParseAddr("48.0.0.1"), 9999, 1, 2)
		if n := recv4(); n != 0 {
			t.Fatalf("b received %d TTL-1 packets", n)
		}
		if n := pktCount(t, f.gw, "p0", "49001"); n < 2 {
			t.Fatalf("the TTL guard counted %d, want >= 2\n%s", n, run(t, "tc", "-n", f.gw, "-s", "filter", "show", "dev", "p0", "ingress"))
		}
	})
	step(t, "reconcile: a foreign filter at our priorities goes, a lost rule comes back", func(t *testing.T) {
		run(t, "tc", "-n", f.gw, "filter", "add", "dev", "p0", "ingress", "protocol", "ip", "pref", "49005", "handle", "0x999",
			"flower", "skip_hw", "dst_ip", "48.0.0.0/8", "action", "drop")
		out := run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress", "pref", "49004")
		var ipv6Handle string
		for _, blk := range strings.Split(out, "filter protocol") {
			if strings.Contains(blk, "eth_type ipv6") && strings.Contains(blk, "handle") {
				fields := strings.Fields(blk[strings.Index(blk, "handle"):])
				ipv6Handle = fields[1]
			}
		}
		if ipv6Handle == "" {
			t.Fatalf("no IPv6 forward in:\n%s", out)
		}
		run(t, "tc", "-n", f.gw, "filter", "del", "dev", "p0", "ingress", "protocol", "802.1Q", "pref", "49004", "handle", ipv6Handle, "flower")
		var removed, missing int
		var err error
		inNetns(t, f.gw, func() { removed, missing, err = inst.Reconcile([]int{f.p0}) })
		if err != nil || removed != 1 || missing != 1 {
			t.Fatalf("reconcile: removed %d missing %d err %v", removed, missing, err)
		}
		st, errs, err := inst.Apply(res.Rules)
		if err != nil || len(errs) != 0 || st.Added != 1 {
			t.Fatalf("re-apply: %+v %v %v", st, errs, err)
		}
		sendUDP(t, f.a, netip.MustParseAddr("2001:db8:48::1"), 9999, 64, 2)
		if n := recv6(); n != 2 {
			t.Fatalf("after reconcile b received %d of 2", n)
		}
	})
	step(t, "removing the rules stops forwarding", func(t *testing.T) {
		st, errs, err := inst.Apply(nil)
		if err != nil || len(errs) != 0 || st.Removed != 6 {
			t.Fatalf("remove: %+v %v %v", st, errs, err)
		}
		if out := run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress"); strings.TrimSpace(out) != "" {
			t.Fatalf("filters left:\n%s", out)
		}
		sendUDP(t, f.a, netip.MustParseAddr("48.0.0.1"), 9999, 64, 2)
		if n := recv4(); n != 0 {
			t.Fatalf("b received %d packets with no rule and forwarding off", n)
		}
	})
}

func TestFlowerProbeNetdevsim(t *testing.T) {
	l := newLab(t)
	ko := os.Getenv("SLUICE_NETDEVSIM")
	if ko == "" {
		t.Skip("SLUICE_NETDEVSIM unset: netdevsim.ko not built (scripts/vmtest.sh builds it with `sluice vm netdevsim`)")
	}
	loadNetdevsim(t, ko)
	var ns, dev string
	step(t, "new device with hw-tc-offload", func(t *testing.T) {
		ns = l.netns(t)
		id := freeNetdevsimID()
		nsRun(t, ns, "sh", "-c", fmt.Sprintf("echo '%d 1' > /sys/bus/netdevsim/new_device", id))
		l.owner.Cleanup(func() { os.WriteFile("/sys/bus/netdevsim/del_device", []byte(fmt.Sprint(id)), 0) })
		dev = netdevsimNetdev(t, ns, id)
		run(t, "ip", "-n", ns, "link", "set", dev, "up")
		nsRun(t, ns, "ethtool", "-K", dev, "hw-tc-offload", "on")
		run(t, "tc", "-n", ns, "qdisc", "add", "dev", dev, "clsact")
	})
	step(t, "probe refuses, with the kernel's reason; nothing is left installed", func(t *testing.T) {
		idx, _ := link(t, ns, dev)
		var p flower.ProbeResult
		inNetns(t, ns, func() {
			fs, err := tcflower.OpenFlowerSocket()
			if err != nil {
				t.Fatal(err)
			}
			defer fs.Close()
			p = flower.Probe(fs, idx, 0)
		})
		if p.OK || p.Msg == "" {
			t.Fatalf("netdevsim accepted a skip_sw flower rule, or gave no reason: %+v", p)
		}
		t.Logf("probe refused: %s\nadvice: %s", p.Msg, flower.ExplainRefusal(dev, p))
		if out := run(t, "tc", "-n", ns, "filter", "show", "dev", dev, "ingress"); strings.TrimSpace(out) != "" {
			t.Fatalf("filters left:\n%s", out)
		}
	})
}

// loadNetdevsim loads the module (and psample, which insmod does not
// resolve) unless an earlier test did.
func loadNetdevsim(t *testing.T, ko string) {
	t.Helper()
	if _, err := os.Stat("/sys/module/netdevsim"); err == nil {
		return
	}
	for _, dep := range strings.Split(strings.TrimSpace(run(t, "modinfo", "-F", "depends", ko)), ",") {
		if dep != "" {
			run(t, "modprobe", dep)
		}
	}
	run(t, "insmod", ko)
}
