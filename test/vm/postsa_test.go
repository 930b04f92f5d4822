// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"sluice/internal/fastpath"
	"sluice/internal/kernel/xfrm"
)

// TestPostSAAgainstKernel extends the kernel-against-program comparison past
// the SA. The kernel in the VM holds real software tunnel-mode SAs of several
// shapes and decides the whole way: a DF ping from gen through each one is
// answered with frag-needed / packet-too-big carrying the SA's MTU, or
// encrypted and sent. The program gets the same policies and SAs, dumped
// from that kernel and marked packet-offloaded on wan0 (the only thing the
// VM cannot have), with the route MTUs read from that kernel, and must
// forward exactly the sizes the kernel sends: at and one below the kernel's
// MTU it forwards, one above it hands the packet to the kernel. Then a PMTU
// the kernel learns from a router (frag-needed for its ESP) must move the
// program's limit as it moves the kernel's, and a locked route MTU too.
//
//	gen -- lan0 [dut: software SAs] wan0 -- r0 [rtr] r1 --(MTU 1400 on the far side)-- sink
//
// Before the post-SA check the program forwarded every size up to the link's
// 1500 bytes (the table); this test failed on each shape.
func TestPostSAAgainstKernel(t *testing.T) {
	l := newLab(t)
	gen, dut, rtr, sink := l.netns(t), l.netns(t), l.netns(t), l.netns(t)
	veth(t, gen, "g0", "10.0.0.1/24", dut, "lan0", "10.0.0.254/24")
	veth(t, dut, "wan0", "123.0.0.1/16", rtr, "r0", "123.0.0.2/16")
	veth(t, rtr, "r1", "124.0.0.2/16", sink, "s0", "124.0.0.254/16")
	nsRun(t, gen, "ip", "addr", "add", "fd00:a::1/64", "dev", "g0", "nodad")
	nsRun(t, dut, "ip", "addr", "add", "fd00:a::fe/64", "dev", "lan0", "nodad")
	nsRun(t, dut, "ip", "addr", "add", "2001:db8:f::1/64", "dev", "wan0", "nodad")
	nsRun(t, rtr, "ip", "addr", "add", "2001:db8:f::2/64", "dev", "r0", "nodad")
	run(t, "ip", "-n", gen, "route", "add", "default", "via", "10.0.0.254")
	run(t, "ip", "-n", gen, "-6", "route", "add", "default", "via", "fd00:a::fe")
	run(t, "ip", "-n", dut, "route", "add", "48.0.0.0/8", "via", "123.0.0.2")
	run(t, "ip", "-n", dut, "route", "add", "124.0.0.0/16", "via", "123.0.0.2")
	run(t, "ip", "-n", dut, "-6", "route", "add", "2001:db8:48::/48", "via", "2001:db8:f::2")
	run(t, "ip", "-n", sink, "route", "add", "default", "via", "124.0.0.2")
	nsRun(t, dut, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1",
		"net.ipv4.icmp_ratelimit=0", "net.ipv6.icmp.ratelimit=0")
	nsRun(t, rtr, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	nsRun(t, rtr, "ip", "link", "set", "r1", "mtu", "1400")
	nsRun(t, sink, "ip", "link", "set", "s0", "mtu", "1400")

	const key16 = "0x0123456789abcdef0123456789abcdef01234567"
	type shape struct {
		name      string
		sel, peer string // the OUT policy's destination, the SA's peer
		local     string
		sa        []string // algorithm (and encapsulation) arguments of `ip xfrm state add`
		ping      string   // an address behind sel
	}
	shapes := []shape{
		{"gcm128 IPv4 outer", "48.0.1.0/24", "123.0.0.254", "123.0.0.1", []string{"aead", "rfc4106(gcm(aes))", key16, "128"}, "48.0.1.1"},
		// an IPv6 SA carries IPv4 only with an IPv4 selector (without one: XfrmOutNoStates)
		{"gcm128 IPv6 outer (IPv4 inside)", "48.0.2.0/24", "2001:db8:f::fe", "2001:db8:f::1",
			[]string{"aead", "rfc4106(gcm(aes))", key16, "128", "sel", "src", "10.0.0.0/24", "dst", "48.0.2.0/24"}, "48.0.2.1"},
		{"gcm 64-bit ICV", "48.0.3.0/24", "123.0.0.253", "123.0.0.1", []string{"aead", "rfc4106(gcm(aes))", key16, "64"}, "48.0.3.1"},
		{"gcm 96-bit ICV, ESN", "48.0.6.0/24", "123.0.0.250", "123.0.0.1", []string{"aead", "rfc4106(gcm(aes))", key16, "96", "flag", "esn", "replay-window", "32"}, "48.0.6.1"},
		{"NAT-T", "48.0.4.0/24", "123.0.0.252", "123.0.0.1", []string{"aead", "rfc4106(gcm(aes))", key16, "128", "encap", "espinudp", "4500", "4500", "0.0.0.0"}, "48.0.4.1"},
		{"cbc(aes) + hmac(sha256)", "48.0.5.0/24", "123.0.0.251", "123.0.0.1",
			[]string{"enc", "cbc(aes)", "0x0123456789abcdef0123456789abcdef", "auth-trunc", "hmac(sha256)", "0x0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "128"}, "48.0.5.1"},
		{"IPv6 in IPv6", "2001:db8:48::/48", "2001:db8:f::fd", "2001:db8:f::1", []string{"aead", "rfc4106(gcm(aes))", key16, "128"}, "2001:db8:48::1"},
	}
	for i, s := range shapes {
		reqid, spi := strconv.Itoa(i+1), fmt.Sprintf("0x%x", 0x1000+i)
		src := "10.0.0.0/24"
		if strings.Contains(s.sel, ":") {
			src = "fd00:a::/64"
		}
		run(t, "ip", append([]string{"-n", dut, "xfrm", "state", "add", "src", s.local, "dst", s.peer, "proto", "esp", "spi", spi,
			"reqid", reqid, "mode", "tunnel"}, s.sa...)...)
		run(t, "ip", "-n", dut, "xfrm", "policy", "add", "src", src, "dst", s.sel, "dir", "out",
			"tmpl", "src", s.local, "dst", s.peer, "proto", "esp", "mode", "tunnel", "reqid", reqid)
	}
	// Peers on the WAN link answer nothing: static neighbours let the
	// kernel send without resolving them.
	for _, s := range shapes {
		nsRun(t, dut, "ip", "neigh", "replace", s.peer, "lladdr", "02:00:00:00:00:99", "dev", "wan0", "nud", "permanent")
	}
	// The program in l2: fib wants the next hop resolved (the kernel
	// would resolve it itself).
	_, rtrMAC := link(t, rtr, "r0")
	nsRun(t, dut, "ip", "neigh", "replace", "123.0.0.2", "lladdr", rtrMAC.String(), "dev", "wan0", "nud", "permanent")
	nsRun(t, dut, "ip", "neigh", "replace", "2001:db8:f::2", "lladdr", rtrMAC.String(), "dev", "wan0", "nud", "permanent")
	lanIdx, lanMAC := link(t, dut, "lan0")
	wanIdx, _ := link(t, dut, "wan0")

	// The kernel's MTU for a destination: the one its ICMP error carries.
	mtuRE := regexp.MustCompile(`mtu ?[=:] ?(\d+)`)
	kernelMTU := func(t *testing.T, dst string, v6 bool) int {
		t.Helper()
		// gen forgets what it learnt before: each answer must be dut's own.
		try("ip", "-n", gen, "route", "flush", "cache")
		try("ip", "-n", gen, "-6", "route", "flush", "cache")
		args := []string{"netns", "exec", gen, "ping", "-c", "1", "-W", "1", "-M", "do", "-s", "1472", dst}
		if v6 {
			args = []string{"netns", "exec", gen, "ping", "-6", "-c", "1", "-W", "1", "-M", "do", "-s", "1452", dst}
		}
		out, _ := try("ip", args...)
		m := mtuRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no frag-needed / packet-too-big from the kernel for a 1500-byte packet to %s:\n%s", dst, out)
		}
		n, _ := strconv.Atoi(m[1])
		// One at the MTU must go through: no error.
		size := n - 28
		if v6 {
			size = n - 48
		}
		args[len(args)-2] = strconv.Itoa(size)
		if out, _ := try("ip", args...); mtuRE.MatchString(out) {
			t.Fatalf("the kernel refused %d bytes to %s although it said mtu %d:\n%s", n, dst, n, out)
		}
		return n
	}

	// The program, with the kernel's policies and SAs as if packet-offloaded.
	var dp *fastpath.Datapath
	compile := func(t *testing.T) {
		t.Helper()
		inNetns(t, dut, func() {
			h, err := netns.Get()
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			snap, err := fastpath.KernelSource{X: xfrm.HandleAt(h)}.Dump()
			if err != nil {
				t.Fatal(err)
			}
			off := &xfrm.Offload{Ifindex: wanIdx, Flags: xfrm.OffloadPacket}
			for i := range snap.Policies {
				snap.Policies[i].Offload = off
			}
			for i := range snap.States {
				snap.States[i].Offload = off
			}
			fastpath.FillRouteMTU(&snap, nil)
			tables, err := fastpath.Compile(snap)
			if err != nil {
				t.Fatal(err)
			}
			if dp == nil {
				if dp, err = fastpath.Load(fastpath.LoadOptions{}); err != nil {
					t.Fatal(err)
				}
				if err := dp.SetIfaces([]fastpath.Iface{{Ifindex: lanIdx, L2: fastpath.L2FIB}, {Ifindex: wanIdx, L2: fastpath.L2FIB}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := dp.Apply(tables); err != nil {
				t.Fatal(err)
			}
			if err := dp.SetReady(true); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Cleanup(func() {
		if dp != nil {
			dp.Close()
		}
	})
	verdict := func(t *testing.T, src, dst string, l3 int, mod func(*fastpath.Packet)) string {
		t.Helper()
		hdr := 20 + 8
		if strings.Contains(dst, ":") {
			hdr = 40 + 8
		}
		p := fastpath.Packet{DstMAC: lanMAC, Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: 17,
			SPort: 1234, DPort: 5678, TTL: 64, Payload: l3 - hdr}
		if mod != nil {
			mod(&p)
		}
		frame, err := p.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		var d *fastpath.Decision
		inNetns(t, dut, func() {
			if d, err = dp.Explain(frame, lanIdx); err != nil {
				t.Fatal(err)
			}
		})
		return d.ReasonName
	}
	agree := func(t *testing.T, s shape, want int) {
		t.Helper()
		v6 := strings.Contains(s.ping, ":")
		got := kernelMTU(t, s.ping, v6)
		if want != 0 && got != want {
			t.Errorf("%s: the kernel says mtu %d, want %d", s.name, got, want)
		}
		src := "10.0.0.1"
		if v6 {
			src = "fd00:a::1"
		}
		for _, l3 := range []int{got - 1, got, got + 1} {
			wantR := "forward-out"
			if l3 > got {
				wantR = "sa-mtu"
			}
			if r := verdict(t, src, s.ping, l3, nil); r != wantR {
				t.Errorf("%s: %d bytes (the kernel's MTU %d): program says %s, want %s", s.name, l3, got, r, wantR)
			}
		}
	}

	compile(t)
	// Expected values: internal/mtu's table; the kernel has the last word.
	want := []int{1446, 1426, 1454, 1450, 1438, 1438, 1426}
	for i, s := range shapes {
		step(t, s.name, func(t *testing.T) { agree(t, s, want[i]) })
	}

	step(t, "IPv4 options and IPv6 extension headers go to the kernel", func(t *testing.T) {
		if r := verdict(t, "10.0.0.1", "48.0.1.1", 200, func(p *fastpath.Packet) { p.IPOptions = true }); r != "ip-options" {
			t.Errorf("IPv4 options: %s, want ip-options", r)
		}
		if r := verdict(t, "fd00:a::1", "2001:db8:48::1", 200, func(p *fastpath.Packet) { p.IPv6Ext = true }); r != "ipv6-ext" {
			t.Errorf("IPv6 hop-by-hop: %s, want ipv6-ext", r)
		}
	})

	step(t, "a learnt PMTU moves both limits", func(t *testing.T) {
		// A tunnel whose peer sits behind rtr's 1400-byte link: its first
		// 1500-byte ESP packet draws frag-needed from rtr, and the kernel
		// learns PMTU 1400 for the peer (esp4_err).
		run(t, "ip", "-n", dut, "xfrm", "state", "add", "src", "123.0.0.1", "dst", "124.0.0.254", "proto", "esp", "spi", "0x2000",
			"reqid", "40", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", key16, "128")
		run(t, "ip", "-n", dut, "xfrm", "policy", "add", "src", "10.0.0.0/24", "dst", "48.0.40.0/24", "dir", "out",
			"tmpl", "src", "123.0.0.1", "dst", "124.0.0.254", "proto", "esp", "mode", "tunnel", "reqid", "40")
		far := shape{name: "behind rtr", ping: "48.0.40.1"}
		compile(t)
		if r := verdict(t, "10.0.0.1", "48.0.40.1", 1446, nil); r != "forward-out" {
			t.Fatalf("before the PMTU is learnt: %s, want forward-out at 1446", r)
		}
		try("ip", "netns", "exec", gen, "ping", "-c", "2", "-W", "1", "-M", "do", "-s", "1400", "48.0.40.1")
		out := run(t, "ip", "-n", dut, "route", "get", "124.0.0.254", "from", "123.0.0.1")
		if !strings.Contains(out, "mtu 1400") {
			t.Fatalf("the kernel learnt no PMTU for the peer:\n%s", out)
		}
		compile(t) // what the mirror's one-second re-check does
		agree(t, far, 1346)
	})

	step(t, "a locked route MTU under the SA", func(t *testing.T) {
		run(t, "ip", "-n", dut, "route", "add", "123.0.0.254/32", "dev", "wan0", "mtu", "lock", "1300")
		compile(t)
		agree(t, shapes[0], 1246)
	})
}

// sends are when a sender wrote each packet: before[k] just before the
// write (no hop saw it earlier), after[k] just after it returned.
type sends struct{ before, after []time.Time }

func (s sends) last() time.Time     { return s.before[len(s.before)-1] }
func (s sends) span() time.Duration { return s.after[len(s.after)-1].Sub(s.before[0]) }
func (s sends) maxGap() (g time.Duration) {
	for k := 1; k < len(s.before); k++ {
		g = max(g, s.after[k].Sub(s.before[k-1]))
	}
	return g
}

// sendPaced sends n small UDP datagrams from ns to addr, gap apart, and
// returns when it wrote each: tests judge time bounds by those, since a
// loaded guest stretches the gaps it asked for.
func sendPaced(t *testing.T, ns, addr string, n int, gap time.Duration) sends {
	t.Helper()
	var s sends
	inNetns(t, ns, func() {
		to, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		// Unconnected: an ICMP error for one datagram fails no later write.
		c, err := net.ListenUDP("udp", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for k := 0; k < n; k++ {
			if k > 0 {
				time.Sleep(gap)
			}
			s.before = append(s.before, time.Now())
			if _, err := c.WriteToUDP([]byte("sluice use time"), to); err != nil {
				t.Fatal(err)
			}
			s.after = append(s.after, time.Now())
		}
	})
	return s
}

// policyUseTime reads a policy's use time the way charon's update_usetime
// does, with XFRM_MSG_GETPOLICY (`ip -s xfrm policy get` sends it); zero
// when the kernel never stamped it.
func policyUseTime(t *testing.T, ns string, args ...string) time.Time {
	t.Helper()
	out := run(t, "ip", append([]string{"-n", ns, "-s", "xfrm", "policy", "get"}, args...)...)
	m := regexp.MustCompile(`use (-|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no use time in:\n%s", out)
	}
	if m[1] == "-" {
		return time.Time{}
	}
	ts, err := time.ParseInLocation("2006-01-02 15:04:05", m[1], time.Local)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
