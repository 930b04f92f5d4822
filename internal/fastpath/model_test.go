package fastpath

import (
	"fmt"
	"math/rand"
	"testing"

	"sluice/internal/kernel"
)

// kernelPorts is what the kernel's xfrm_flowi_sport/dport report for a
// packet: real ports for TCP/UDP/UDP-Lite/SCTP, type/code for ICMP.
func kernelPorts(p Packet) (uint16, uint16) {
	switch p.Proto {
	case 6, 17, 136, 132:
		return p.SPort, p.DPort
	case 1, 58:
		return uint16(p.ICMPType), uint16(p.ICMPCode)
	}
	return 0, 0
}

// selectorMatches is __xfrm4/6_selector_match, written plainly.
func selectorMatches(sel kernel.Selector, p Packet) bool {
	sp, dp := kernelPorts(p)
	return sel.Src.Contains(p.Src) && sel.Dst.Contains(p.Dst) &&
		(sel.Proto == 0 || sel.Proto == p.Proto) &&
		(sp^sel.SPort)&sel.SPortMask == 0 && (dp^sel.DPort)&sel.DPortMask == 0
}

type modelBest struct {
	pol       *kernel.Policy
	uncertain bool
}

// modelLookup is the kernel's policy lookup for one direction as a linear
// scan: the lowest priority value wins; an equal-priority rival, or a
// winner whose match depends on marks/if_id/..., makes it uncertain.
func modelLookup(pols []kernel.Policy, dir kernel.Dir, p Packet) modelBest {
	var b modelBest
	for i := range pols {
		q := &pols[i]
		if q.Dir != dir || q.Mark&^q.MarkMask != 0 || !selectorMatches(q.Sel, p) {
			continue
		}
		switch {
		case b.pol == nil || q.Priority < b.pol.Priority:
			b = modelBest{pol: q, uncertain: uncertain(q)}
		case q.Priority == b.pol.Priority:
			b.uncertain = true
		}
	}
	return b
}

// modelDecide is the fast path's contract in terms of the model: which
// reason the program must give (routes exist for every destination used).
func modelDecide(s Snapshot, p Packet, ingress int, inboundOK bool, offloadDev func(*kernel.Policy) int) Reason {
	if p.TTL <= 1 {
		return ReasonTTL
	}
	in := modelLookup(s.Policies, kernel.DirIn, p)
	out := modelLookup(s.Policies, kernel.DirOut, p)
	fwd := modelLookup(s.Policies, kernel.DirFwd, p)
	fwdNeedsSA := fwd.pol != nil && (fwd.pol.Action == kernel.ActionBlock || requiresSA(fwd.pol))
	if in.pol != nil || fwdNeedsSA {
		dec := fwd
		if fwd.pol == nil {
			dec = in
		}
		if dec.uncertain || (in.pol != nil && in.uncertain) {
			return ReasonUncertain
		}
		if dec.pol.Action == kernel.ActionBlock || (in.pol != nil && in.pol.Action == kernel.ActionBlock) {
			return ReasonBlock
		}
		sa := in
		if in.pol == nil {
			sa = fwd
		}
		if !inboundOK || offloadDev(sa.pol) != ingress {
			return ReasonInbound
		}
		return ReasonForwardIn
	}
	switch {
	case out.pol == nil:
		return ReasonNoPolicy
	case out.uncertain:
		return ReasonUncertain
	case out.pol.Action == kernel.ActionBlock:
		return ReasonBlock
	case offloadDev(out.pol) == 0:
		return ReasonNotOffloaded
	case fwd.pol != nil && fwd.uncertain:
		return ReasonUncertain
	case fwd.pol == nil && s.FwdDefaultBlock:
		return ReasonFwdCheck
	}
	return ReasonForwardOut
}

func requiresSA(p *kernel.Policy) bool {
	for _, t := range p.Tmpls {
		if !t.Optional {
			return true
		}
	}
	return false
}

// Address universes: nested prefixes so random policies overlap a lot.
var (
	lanPrefixes4 = []string{"0.0.0.0/0", "10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.2.3/32", "10.2.0.0/16"}
	remPrefixes4 = []string{"0.0.0.0/0", "48.0.0.0/8", "48.1.0.0/16", "48.1.2.0/24", "48.1.2.3/32", "48.2.0.0/16"}
	lanHosts4    = []string{"10.1.2.3", "10.1.2.4", "10.1.9.9", "10.2.0.1", "10.3.0.1"}
	remHosts4    = []string{"48.1.2.3", "48.1.2.4", "48.1.9.9", "48.2.0.1", "48.3.0.1"}
	lanPrefixes6 = []string{"::/0", "fd00::/16", "fd00:1::/32", "fd00:1:2::/48", "fd00:1:2::3/128"}
	remPrefixes6 = []string{"::/0", "2001:db8:48::/48", "2001:db8:48:1::/64", "2001:db8:48:1::3/128"}
	lanHosts6    = []string{"fd00:1:2::3", "fd00:1:2::4", "fd00:1:9::9", "fd00:2::1"}
	remHosts6    = []string{"2001:db8:48:1::3", "2001:db8:48:1::4", "2001:db8:48:2::1"}
)

func pick[T any](r *rand.Rand, s []T) T { return s[r.Intn(len(s))] }

func randomPolicy(r *rand.Rand, v6 bool, idx uint32, wan int) kernel.Policy {
	lanP, remP, peer := lanPrefixes4, remPrefixes4, "123.2.0.1"
	if v6 {
		lanP, remP, peer = lanPrefixes6, remPrefixes6, "2001:db8:f::99"
	}
	dir := kernel.Dir(r.Intn(3))
	src, dst := pick(r, lanP), pick(r, remP)
	if dir != kernel.DirOut {
		src, dst = dst, src
	}
	dev := 0
	if r.Intn(4) != 0 {
		dev = wan
	}
	p := tunnelPolicy(dir, src, dst, uint32(r.Intn(6)*10), peer, idx, dev)
	p.Index = idx<<3 | uint32(dir)
	switch r.Intn(8) {
	case 0:
		p.Sel.Proto, p.Sel.DPort, p.Sel.DPortMask = 6, 443, 0xffff
	case 1:
		p.Sel.Proto, p.Sel.SPort, p.Sel.SPortMask = 17, 0x1000, 0xf000
	case 2:
		p.Sel.Proto = 1
		p.Sel.SPort, p.Sel.SPortMask = 8, 0xffff // ICMP echo request
	}
	switch r.Intn(12) {
	case 0:
		p.Action = kernel.ActionBlock
	case 1:
		p.Mark, p.MarkMask = 1, 0xff
	case 2:
		p.Mark, p.MarkMask = 1, 0 // can never match
	case 3:
		p.Tmpls[0].Optional = true
	}
	return p
}

func randomPacket(r *rand.Rand, v6 bool) (Packet, bool) {
	lanH, remH := lanHosts4, remHosts4
	if v6 {
		lanH, remH = lanHosts6, remHosts6
	}
	p := Packet{Src: addr(pick(r, lanH)), Dst: addr(pick(r, remH)), TTL: pick(r, []uint8{1, 2, 64, 64, 64, 255})}
	inbound := r.Intn(3) == 0
	if inbound {
		p.Src, p.Dst = p.Dst, p.Src
	}
	switch r.Intn(4) {
	case 0:
		p.Proto, p.SPort, p.DPort = 6, uint16(r.Intn(3)*0x1000), pick(r, []uint16{80, 443})
	case 1:
		p.Proto, p.SPort, p.DPort = 17, pick(r, []uint16{0x1234, 0x2000, 53}), 53
	case 2:
		p.Proto, p.ICMPType = 1, pick(r, []uint8{8, 0})
		if v6 {
			p.Proto, p.ICMPType = 58, pick(r, []uint8{128, 129})
		}
	default:
		p.Proto = 4 // IP-in-IP: the kernel matches its ports as 0
	}
	return p, inbound
}

// TestClassifierMatchesKernelModel compares the program with the model on
// seeded random policy sets and packets (wireguard-go's allowedips_rand
// approach). A failure prints the seed, the packet and both answers.
func TestClassifierMatchesKernelModel(t *testing.T) {
	e := newTestEnv(t)
	const rounds, policies, packets = 40, 24, 60
	seen := map[Reason]int{}
	for round := 0; round < rounds; round++ {
		seed := int64(1000 + round)
		r := rand.New(rand.NewSource(seed))
		v6 := round%2 == 1
		inboundOK := round%3 == 0
		e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB, InboundForward: inboundOK})
		var s Snapshot
		s.FwdDefaultBlock = round%5 == 4
		for i := 0; i < policies; i++ {
			p := randomPolicy(r, v6, uint32(i+1), e.wan)
			s.Policies = append(s.Policies, p)
			if p.Dir != kernel.DirFwd {
				dev := 0
				if p.Offload != nil {
					dev = p.Offload.Ifindex
				}
				s.States = append(s.States, saFor(p, dev))
			}
		}
		e.apply(s)
		offloadDev := func(p *kernel.Policy) int { return packetOffloadDevice(p, s.States) }
		for i := 0; i < packets; i++ {
			pkt, inbound := randomPacket(r, v6)
			ingress := e.lan
			if inbound {
				ingress = e.wan
			}
			want := modelDecide(s, pkt, ingress, inboundOK, offloadDev)
			got := e.explain(pkt, ingress)
			seen[got.Reason]++
			if got.Reason != want {
				t.Fatalf("seed %d packet %d: %s -> %s proto %d ports %d/%d ttl %d on %s: program says %s (policy %d), model says %s\npolicies:\n%s",
					seed, i, pkt.Src, pkt.Dst, pkt.Proto, pkt.SPort, pkt.DPort, pkt.TTL, map[bool]string{true: "wan", false: "lan"}[inbound],
					got.ReasonName, got.PolicyIndex, want, describe(s.Policies))
			}
		}
	}

	// A generator that stopped producing some outcome would make this
	// test pass without testing: demand every outcome.
	for _, r := range []Reason{ReasonForwardOut, ReasonForwardIn, ReasonNoPolicy, ReasonBlock, ReasonUncertain,
		ReasonNotOffloaded, ReasonFwdCheck, ReasonInbound, ReasonTTL} {
		if seen[r] == 0 {
			t.Errorf("no random packet produced %s: %v", r, seen)
		}
	}
	t.Logf("outcomes: %v", seen)
}

func describe(ps []kernel.Policy) string {
	out := ""
	for _, p := range ps {
		off := 0
		if p.Offload != nil {
			off = p.Offload.Ifindex
		}
		opt := len(p.Tmpls) > 0 && p.Tmpls[0].Optional
		out += fmt.Sprintf("  %d %s %s -> %s proto %d sport %d/%#x dport %d/%#x prio %d action %d mark %d/%#x offload %d optional %v\n",
			p.Index, p.Dir, p.Sel.Src, p.Sel.Dst, p.Sel.Proto, p.Sel.SPort, p.Sel.SPortMask, p.Sel.DPort, p.Sel.DPortMask,
			p.Priority, p.Action, p.Mark, p.MarkMask, off, opt)
	}
	return out
}
