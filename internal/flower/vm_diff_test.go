// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"encoding/binary"
	"math/rand"
	"net/netip"
	"syscall"
	"testing"

	"sluice/internal/fastpath"
	"sluice/internal/flower"
	"sluice/internal/kernel"
	"sluice/internal/kernel/tcflower"
	"sluice/internal/kernel/xfrm"
)

// randomPolicySet is a seeded, heavily overlapping set of policies between
// 10.0/16 and 48.0/16: OUT allow (mostly packet-offloaded on dev, some in
// software), OUT block, fwd-out policies optional or not, FWD blocks, IN
// policies and marked (uncertain) ones, with shared priorities (ties).
// A made-up snapshot on purpose: the test compares the tier's decision with
// XDP's on the same input, and marked, FWD-block and multi-shape sets are
// what no device offloads (the NIC model refuses FWD policies, as mlx5).
func randomPolicySet(rng *rand.Rand, dev int) fastpath.Snapshot {
	var s fastpath.Snapshot
	// Destinations: mostly /24s among 64 (tunnels rarely share one),
	// some /20s and /16s that overlap many; sources mostly the LAN /16.
	pfx := func(base [4]byte) netip.Prefix {
		bits := []int{24, 24, 24, 20, 16}[rng.Intn(5)]
		base[2] = byte(rng.Intn(64))
		return netip.PrefixFrom(netip.AddrFrom4(base), bits).Masked()
	}
	srcPfx := func() netip.Prefix {
		if rng.Intn(3) == 0 {
			return pfx([4]byte{10, 0})
		}
		return netip.MustParsePrefix("10.0.0.0/16")
	}
	local, peer := netip.MustParseAddr("123.0.0.1"), netip.MustParseAddr("123.0.0.2")
	for i := 0; i < 24; i++ {
		idx := uint32(8*i + 8)
		// Priorities as strongSwan derives them: the more specific the
		// selector, the better (lower) the value, with some ties.
		p := xfrm.Policy{Index: idx, Dir: xfrm.DirOut,
			Sel: xfrm.Selector{Src: srcPfx(), Dst: pfx([4]byte{48, 0})}}
		p.Priority = uint32(1000 - 10*p.Sel.Dst.Bits() + 5*rng.Intn(2))
		switch rng.Intn(3) {
		case 1:
			p.Sel.Proto = 17
		case 2:
			p.Sel.Proto = 6
			if rng.Intn(2) == 0 {
				p.Sel.DPort, p.Sel.DPortMask = uint16(80+rng.Intn(2)), 0xffff
			}
		}
		switch k := rng.Intn(12); {
		case k < 8: // OUT allow with its SA and strongSwan's fwd-out
			tm := xfrm.Tmpl{Src: local, Dst: peer, Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, Reqid: idx}
			p.Tmpls = []xfrm.Tmpl{tm}
			p.Offload = &xfrm.Offload{Ifindex: dev, Flags: xfrm.OffloadPacket}
			sa := xfrm.State{Src: local, Dst: peer, Proto: xfrm.ProtoESP, SPI: 0x100 + idx, Reqid: idx, Mode: xfrm.ModeTunnel, Offload: p.Offload}
			if rng.Intn(6) == 0 {
				sa.Offload = nil // software SA: not XDP's, not flower's
			}
			s.States = append(s.States, sa)
			fwd := p
			fwd.Index, fwd.Dir, fwd.Offload = idx+2, xfrm.DirFwd, nil
			opt := tm
			opt.Optional = rng.Intn(5) != 0
			fwd.Tmpls = []xfrm.Tmpl{opt}
			if rng.Intn(8) == 0 {
				p.Mark, p.MarkMask = 1, 1 // uncertain
			}
			s.Policies = append(s.Policies, p, fwd)
		case k < 10:
			p.Action = xfrm.ActionBlock
			s.Policies = append(s.Policies, p)
		case k < 11:
			p.Dir, p.Action = xfrm.DirFwd, xfrm.ActionBlock
			p.Sel.Dst = netip.PrefixFrom(p.Sel.Dst.Addr(), 24)
			s.Policies = append(s.Policies, p)
		default:
			p.Dir = xfrm.DirIn
			p.Sel.Dst = netip.PrefixFrom(p.Sel.Dst.Addr(), 24)
			s.Policies = append(s.Policies, p)
		}
	}
	return s
}

// injector writes raw Ethernet frames onto a device from inside a namespace.
func injector(t *testing.T, ns, dev string) func(frame []byte) {
	t.Helper()
	var fd, idx int
	inNetns(t, ns, func() {
		var err error
		fd, err = syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, int(binary.BigEndian.Uint16([]byte{0, 3})))
		if err != nil {
			t.Fatal(err)
		}
		li, err := kernel.Link(dev)
		if err != nil {
			t.Fatal(err)
		}
		idx = li.Ifindex
	})
	t.Cleanup(func() { syscall.Close(fd) })
	return func(frame []byte) {
		if err := syscall.Sendto(fd, frame, 0, &syscall.SockaddrLinklayer{Ifindex: idx}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFlowerMatchesXDP: for seeded random policy sets, a packet the
// installed rules forward is one the XDP program (explain) forwards out of
// the same device; every rule's selector is one XDP forwards; and the
// rules cover a share of XDP's forwards (reported).
func TestFlowerMatchesXDP(t *testing.T) {
	l := newLab(t)
	var a, gw, b string
	step(t, "topology", func(t *testing.T) {
		a, gw, b = l.netns(t), l.netns(t), l.netns(t)
		veth(t, a, "inj", "", gw, "lan0", "10.0.255.254/16")
		veth(t, gw, "wan0", "123.0.0.1/24", b, "wan0", "123.0.0.2/24")
		run(t, "ip", "-n", gw, "route", "add", "48.0.0.0/8", "via", "123.0.0.2")
		_, bmac := link(t, b, "wan0")
		run(t, "ip", "-n", gw, "neigh", "replace", "123.0.0.2", "lladdr", bmac.String(), "dev", "wan0", "nud", "permanent")
		nsRun(t, gw, "sysctl", "-qw", "net.ipv4.ip_forward=1")
		run(t, "tc", "-n", gw, "qdisc", "add", "dev", "lan0", "clsact")
	})
	lan, lanMAC := link(t, gw, "lan0")
	wan, _ := link(t, gw, "wan0")
	inject := injector(t, a, "inj")
	var dp *fastpath.Datapath
	var fs *tcflower.Socket
	inNetns(t, gw, func() {
		var err error
		if dp, err = fastpath.Load(fastpath.LoadOptions{}); err != nil {
			t.Fatal(err)
		}
		if err = dp.SetIfaces([]fastpath.Iface{{Ifindex: lan, L2: fastpath.L2FIB}, {Ifindex: wan, L2: fastpath.L2FIB}}); err != nil {
			t.Fatal(err)
		}
		if fs, err = tcflower.Open(); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { dp.Close(); fs.Close() })
	ports := []flower.Port{{Name: "lan0", Ifindex: lan, MAC: lanMAC, Outbound: true, TTL: true, L2FIB: true}, {Name: "wan0", Ifindex: wan, L2FIB: true}}

	var sound, covered, xdpFwd, rulesChecked int
	for seed := int64(1); seed <= 6; seed++ {
		rng := rand.New(rand.NewSource(seed))
		snap := withRouteMTU(randomPolicySet(rng, wan))
		inst := &flower.Installer{FS: fs, SkipHW: true}
		var res flower.Result
		inNetns(t, gw, func() {
			tables, err := fastpath.Compile(snap)
			if err != nil {
				t.Fatal(err)
			}
			if err := dp.Apply(tables); err != nil {
				t.Fatal(err)
			}
			res = flower.Derive(flower.Input{Views: fastpath.PolicyViews(snap), Ports: ports, Router: flower.KernelRouter{}, InboundChain: 1})
			if _, errs, err := inst.Apply(res.Rules); err != nil || len(errs) > 0 {
				t.Fatalf("seed %d: install: %v %v", seed, errs, err)
			}
		})
		explain := func(p fastpath.Packet) *fastpath.Decision {
			frame, err := p.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			var d *fastpath.Decision
			inNetns(t, gw, func() {
				if d, err = dp.Explain(frame, lan); err != nil {
					t.Fatal(err)
				}
			})
			return d
		}
		hw := func() uint64 {
			var n uint64
			inNetns(t, gw, func() {
				m, err := inst.RulePackets()
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range m {
					n += v
				}
			})
			return n
		}
		// Every rule's selector: a packet at its first addresses is an
		// XDP forward out of the rule's egress.
		for _, r := range res.Rules {
			if r.Kind != flower.KindForward {
				continue
			}
			p := fastpath.Packet{DstMAC: lanMAC, Src: r.Src.Addr(), Dst: r.Dst.Addr(), Proto: 17, SPort: 1000, DPort: 53, TTL: 64, Payload: 16}
			if r.Proto != 0 {
				p.Proto = r.Proto
			}
			if r.DPortMask != 0 {
				p.DPort = r.DPort
			}
			if d := explain(p); d.Reason != fastpath.ReasonForwardOut || int(d.EgressIfindex) != r.Redirect {
				t.Errorf("seed %d: rule %s forwards a packet XDP decides %s (%s, egress %d)", seed, r.String(), d.ActionName, d.ReasonName, d.EgressIfindex)
			}
			rulesChecked++
		}
		before := hw()
		for i := 0; i < 40; i++ {
			// Half the packets aim inside an installed rule's selector,
			// the rest anywhere.
			p := fastpath.Packet{DstMAC: lanMAC,
				Src:   netip.AddrFrom4([4]byte{10, 0, byte(rng.Intn(64)), byte(1 + rng.Intn(250))}),
				Dst:   netip.AddrFrom4([4]byte{48, 0, byte(rng.Intn(64)), byte(1 + rng.Intn(250))}),
				Proto: []uint8{6, 17}[rng.Intn(2)], SPort: 1000, DPort: uint16(79 + rng.Intn(3)), TTL: 64, Payload: 16}
			if fw := forwards(res); len(fw) > 0 && rng.Intn(2) == 0 {
				// Inside a rule's selector, give or take its port.
				r := fw[rng.Intn(len(fw))]
				p.Src, p.Dst = inside(rng, r.Src), inside(rng, r.Dst)
				if r.Proto != 0 {
					p.Proto = r.Proto
				}
			}
			if rng.Intn(10) == 0 {
				p.TTL = 1
			}
			d := explain(p)
			frame, _ := p.Marshal()
			inject(frame)
			after := hw()
			byRule := after > before
			before = after
			if d.Reason == fastpath.ReasonForwardOut {
				xdpFwd++
			}
			if byRule {
				covered++
				if d.Reason != fastpath.ReasonForwardOut || int(d.EgressIfindex) != wan {
					t.Errorf("seed %d: the rules forwarded %v -> %v (%d dport %d ttl %d), XDP: %s (%s)", seed, p.Src, p.Dst, p.Proto, p.DPort, p.TTL, d.ActionName, d.ReasonName)
				} else {
					sound++
				}
			}
		}
		if _, errs, err := inst.Apply(nil); err != nil || len(errs) > 0 {
			t.Fatalf("remove: %v %v", errs, err)
		}
	}
	t.Logf("%d rules checked against XDP; %d random packets forwarded by rules, all XDP forwards too; XDP forwarded %d (rules covered %d of them)", rulesChecked, covered, xdpFwd, sound)
	if rulesChecked < 10 || covered < 20 {
		t.Fatalf("vacuous: %d rules, %d packets forwarded by rules; change the generator", rulesChecked, covered)
	}
}

func forwards(r flower.Result) []flower.Rule {
	var out []flower.Rule
	for _, x := range r.Rules {
		if x.Kind == flower.KindForward {
			out = append(out, x)
		}
	}
	return out
}

// inside returns a random host address inside an IPv4 prefix.
func inside(rng *rand.Rand, p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := rng.Uint32() & (1<<(32-p.Bits()) - 1)
	v := binary.BigEndian.Uint32(b[:]) | host
	if v&0xff == 0 || v&0xff == 0xff {
		v = v&^0xff | 7
	}
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}
