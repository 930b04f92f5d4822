// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"sluice/internal/kernel/xfrm"
)

// selectorMatches is __xfrm4/6_selector_match, written plainly, on the
// fields modelParse decoded (ports as xfrm_flowi_sport/dport give them).
func selectorMatches(sel xfrm.Selector, p modelPkt) bool {
	return sel.Src.Contains(p.src) && sel.Dst.Contains(p.dst) &&
		(sel.Proto == 0 || sel.Proto == p.proto) &&
		(p.sport^sel.SPort)&sel.SPortMask == 0 && (p.dport^sel.DPort)&sel.DPortMask == 0
}

type modelBest struct {
	pol       *xfrm.Policy
	uncertain bool
}

// markMode says how a policy's mark is judged: by the fast path (any mark
// makes the policy uncertain: XDP cannot see the packet's mark) or by the
// kernel for a packet of mark 0 (6.18 stores value & mask and matches
// (mark & mask) == value).
type markMode int

const (
	marksUncertain markMode = iota
	marksKernel
)

// modelLookup is the kernel's policy lookup for one direction
// (xfrm_policy_lookup) as a linear scan: SUB-type policies first, and a
// SUB match wins whatever the MAIN priorities; within a type the lowest
// priority value wins. An equal-priority rival, a SUB winner, or a winner
// whose match depends on marks/if_id/... makes it uncertain.
func modelLookup(pols []xfrm.Policy, dir xfrm.Dir, p modelPkt, marks markMode) modelBest {
	if b := modelLookupType(pols, dir, p, marks, true); b.pol != nil {
		b.uncertain = true
		return b
	}
	return modelLookupType(pols, dir, p, marks, false)
}

func modelLookupType(pols []xfrm.Policy, dir xfrm.Dir, p modelPkt, marks markMode, sub bool) modelBest {
	var b modelBest
	for i := range pols {
		q := &pols[i]
		if q.Dir != dir || q.Sub != sub || q.Sel.Src.Addr().Is6() != p.v6 || !selectorMatches(q.Sel, p) {
			continue
		}
		if marks == marksKernel && q.Mark&q.MarkMask != 0 {
			continue // a packet of mark 0 never matches
		}
		switch {
		case b.pol == nil || q.Priority < b.pol.Priority:
			// judged by the kernel, only a tie leaves the choice open
			b = modelBest{pol: q, uncertain: marks == marksUncertain && uncertain(q)}
		case q.Priority == b.pol.Priority:
			b.uncertain = true
		}
	}
	return b
}

// modelGateway is what modelDecide needs to know of the gateway.
type modelGateway struct {
	ingress    int
	ingressMAC net.HardwareAddr
	inboundOK  bool
	own        []netip.Addr // the gateway's addresses
	offloadDev func(*xfrm.Policy) int
	routeOf    func(netip.Addr) int // egress of the route to an address
}

// modelDecide is the fast path's contract in terms of the model: which
// reason the program must give for frame (routes exist for every
// destination used), in the program's order of checks.
func modelDecide(s Snapshot, frame []byte, g modelGateway) Reason {
	p, r := modelParse(frame)
	if r != parseOK {
		return r
	}
	if !bytes.Equal(p.dmac, g.ingressMAC) {
		return ReasonL2NotOurs
	}
	if modelMartian(p) {
		return ReasonMartian
	}
	if p.ttl <= 1 {
		return ReasonTTL
	}
	in := modelLookup(s.Policies, xfrm.DirIn, p, marksUncertain)
	out := modelLookup(s.Policies, xfrm.DirOut, p, marksUncertain)
	fwd := modelLookup(s.Policies, xfrm.DirFwd, p, marksUncertain)
	if p.icmpErr && fwd.pol == nil {
		return ReasonICMPError
	}
	ownSource := !p.v6 && slices.Contains(g.own, p.src)
	fwdNeedsSA := fwd.pol != nil && (fwd.pol.Action == xfrm.ActionBlock || requiresSA(fwd.pol) || fwd.uncertain)
	if in.pol != nil || fwdNeedsSA {
		dec := fwd
		if fwd.pol == nil {
			dec = in
		}
		if dec.uncertain || (in.pol != nil && in.uncertain) {
			return ReasonUncertain
		}
		if dec.pol.Action == xfrm.ActionBlock || (in.pol != nil && in.pol.Action == xfrm.ActionBlock) {
			return ReasonBlock
		}
		sa := in
		if in.pol == nil {
			sa = fwd
		}
		if !g.inboundOK || g.offloadDev(sa.pol) != g.ingress {
			return ReasonInbound
		}
		if ownSource {
			return ReasonMartian
		}
		return ReasonForwardIn
	}
	switch {
	case out.pol == nil:
		return ReasonNoPolicy
	case out.uncertain:
		return ReasonUncertain
	case out.pol.Action == xfrm.ActionBlock:
		return ReasonBlock
	case g.offloadDev(out.pol) == 0:
		return ReasonNotOffloaded
	case fwd.pol != nil && fwd.uncertain:
		return ReasonUncertain
	case fwd.pol == nil && s.FwdDefaultBlock:
		return ReasonFwdCheck
	case ownSource:
		return ReasonMartian
	case g.routeOf(p.dst) != g.offloadDev(out.pol):
		return Reason(fastpathFpReasonFP_R_ROUTE_MISMATCH)
	}
	return ReasonForwardOut
}

func requiresSA(p *xfrm.Policy) bool {
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

func randomPolicy(r *rand.Rand, v6 bool, idx uint32, wan int) xfrm.Policy {
	lanP, remP, peer := lanPrefixes4, remPrefixes4, "123.2.0.1"
	if v6 {
		lanP, remP, peer = lanPrefixes6, remPrefixes6, "2001:db8:f::99"
	}
	dir := xfrm.Dir(r.Intn(3))
	src, dst := pick(r, lanP), pick(r, remP)
	if dir != xfrm.DirOut {
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
		if v6 {
			p.Sel.Proto = 58
		}
		p.Sel.SPort, p.Sel.SPortMask = 8, 0xffff // ICMP echo request
		if v6 {
			p.Sel.SPort = 128
		}
	case 3:
		p.Sel.Proto, p.Sel.SPort, p.Sel.SPortMask, p.Sel.DPort, p.Sel.DPortMask = 17, 1234, 0xffff, 80, 0xffff
	case 4:
		p.Sel.Proto = 17 // any UDP: ports 0 included
	}
	switch r.Intn(14) {
	case 0, 1:
		p.Action = xfrm.ActionBlock
	case 2:
		p.Mark, p.MarkMask = 1, 0xff
	case 3:
		p.Mark, p.MarkMask = 1, 0 // 6.18 stores 0/0: no mark at all
	case 4:
		p.Tmpls[0].Optional = true
	case 5, 6:
		p.Sub = true // looked up before every MAIN policy
	}
	return p
}

// Hosts the generator draws hostile packets from: martians (never
// forwarded by the kernel) and the gateway's own addresses (a martian
// source for IPv4).
var (
	martians4 = []string{"0.0.0.5", "127.0.0.1", "224.0.0.9", "239.1.2.3", "255.255.255.255"}
	martians6 = []string{"::", "::1", "fe80::1", "ff02::1", "::ffff:10.1.2.3"}
	own4      = []string{"10.0.0.254", "123.0.0.1"}
	own6      = []string{"fd00:a::fe", "2001:db8:f::1"}
)

// randomPacket draws a well-formed packet between the LAN and remote
// universes, inbound (source remote) or outbound.
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
	switch r.Intn(5) {
	case 0:
		p.Proto, p.SPort, p.DPort = 6, uint16(r.Intn(3)*0x1000), pick(r, []uint16{80, 443})
	case 1:
		p.Proto, p.SPort, p.DPort = 17, pick(r, []uint16{0x1234, 0x2000, 53, 1234}), pick(r, []uint16{53, 80})
	case 2:
		p.Proto, p.ICMPType = 1, pick(r, []uint8{8, 0})
		if v6 {
			p.Proto, p.ICMPType = 58, pick(r, []uint8{128, 129})
		}
	case 3:
		p.Proto = 4 // IP-in-IP: the kernel matches its ports as 0
	default:
		p.Proto, p.SPort, p.DPort = 17, 1234, 80
	}
	return p, inbound
}

// hostile turns a packet into one of the shapes the kernel treats in its
// own way (issue 12): ICMP errors quoting a packet, ICMP of the other
// family, a short ICMP header, L4 fields past the IP length (in the
// Ethernet padding), group or foreign destination MACs, bad IPv4
// checksums and lengths, IPv6 payload lengths beyond the frame, martians
// and the gateway's own addresses. shape names the change for failure
// messages ("" for none).
func hostile(r *rand.Rand, p Packet, v6 bool, ingressMAC net.HardwareAddr) (frame []byte, shape string) {
	p.DstMAC = ingressMAC
	var l3Len = -1 // L4 bytes to leave within the IP length; -1: all
	switch r.Intn(16) {
	case 0:
		shape = "icmp-error"
		inner := Packet{Src: p.Dst, Dst: p.Src, Proto: 17, SPort: 1234, DPort: 80, TTL: 64}
		if r.Intn(2) == 0 {
			inner = Packet{Src: addr(pick(r, map[bool][]string{false: remHosts4, true: remHosts6}[v6])), Dst: p.Src, Proto: 6, SPort: 443, DPort: 40000, TTL: 64}
		}
		q, _ := inner.L3()
		p.Proto, p.ICMPType, p.ICMPCode, p.Quote, p.Payload = 1, pick(r, []uint8{3, 11}), 1, q, 0
		if v6 {
			p.Proto, p.ICMPType = 58, pick(r, []uint8{1, 2, 3})
		}
	case 1:
		shape = "icmp-of-the-other-family"
		p.Proto, p.ICMPType, p.ICMPCode = 58, 8, 0
		if v6 {
			p.Proto, p.ICMPType = 1, 128
		}
	case 2:
		shape = "short-icmp"
		p.Proto, p.ICMPType = 1, 8
		if v6 {
			p.Proto, p.ICMPType = 58, 128
		}
		l3Len = 4
	case 3:
		shape = "ports-in-padding"
		p.Proto, p.SPort, p.DPort, p.Payload = 17, 1234, 80, 0
		l3Len = 2
	case 4:
		shape = "group-mac"
		p.DstMAC = pick(r, []net.HardwareAddr{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, {0x01, 0x00, 0x5e, 0, 0, 1}, {0x33, 0x33, 0, 0, 0, 1}})
	case 5:
		shape = "other-host-mac"
		p.DstMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}
	case 6:
		shape = "martian"
		m := pick(r, map[bool][]string{false: martians4, true: martians6}[v6])
		if r.Intn(2) == 0 {
			p.Src = addr(m)
		} else {
			p.Dst = addr(m)
		}
	case 7:
		shape = "own-source"
		p.Src = addr(pick(r, map[bool][]string{false: own4, true: own6}[v6]))
	}
	frame, err := p.Marshal()
	if err != nil {
		panic(err)
	}
	if l3Len >= 0 {
		setL4Len(frame, v6, l3Len)
	}
	if shape == "" && r.Intn(2) == 0 {
		switch r.Intn(4) {
		case 0:
			if !v6 {
				shape = "bad-checksum"
				frame[14+10] ^= 0x40
			}
		case 1:
			shape = "ip-length-beyond-frame"
			setL4Len(frame, v6, len(frame)-14-map[bool]int{false: 20, true: 40}[v6]+r.Intn(3)+1)
		case 2:
			if !v6 {
				shape = "ip-length-below-header"
				binary.BigEndian.PutUint16(frame[14+2:], uint16(r.Intn(20)))
				fixIPv4Checksum(frame)
			}
		case 3:
			shape = "padded"
			frame = append(frame, make([]byte, 1+r.Intn(30))...)
		}
	}
	return frame, shape
}

// setL4Len sets the IP length of an untagged frame so that n bytes of L4
// lie within it; the bytes after stay in the frame, as Ethernet padding.
func setL4Len(frame []byte, v6 bool, n int) {
	if v6 {
		binary.BigEndian.PutUint16(frame[14+4:], uint16(n))
		return
	}
	binary.BigEndian.PutUint16(frame[14+2:], uint16(20+n))
	fixIPv4Checksum(frame)
}

func fixIPv4Checksum(frame []byte) {
	h := frame[14 : 14+20]
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], checksum(h, 0))
}

// modelSeed is the seed of this run's random tests: SLUICE_MODEL_SEED when
// set (to repeat a failure), else a fresh one, logged either way.
func modelSeed(t *testing.T) int64 {
	t.Helper()
	seed := time.Now().UnixNano()
	if v := os.Getenv("SLUICE_MODEL_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("SLUICE_MODEL_SEED=%q: not an integer", v)
		}
		seed = n
	}
	t.Logf("random seed %d (repeat with SLUICE_MODEL_SEED=%d)", seed, seed)
	return seed
}

// modelRounds is how many random rounds to run: def, or SLUICE_MODEL_ROUNDS
// for a longer run (make test-model-long).
func modelRounds(t *testing.T, def int) int {
	if v := os.Getenv("SLUICE_MODEL_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_MODEL_ROUNDS=%q: want a positive integer", v)
		}
		return n
	}
	return def
}

// randomSnapshot draws a policy set of one family with its SAs.
func randomSnapshot(r *rand.Rand, v6 bool, n, wan int) Snapshot {
	var s Snapshot
	for i := 0; i < n; i++ {
		p := randomPolicy(r, v6, uint32(i+1), wan)
		s.Policies = append(s.Policies, p)
		if p.Dir != xfrm.DirFwd {
			dev := 0
			if p.Offload != nil {
				dev = p.Offload.Ifindex
			}
			s.States = append(s.States, saFor(p, dev))
		}
	}
	return s
}

// TestClassifierMatchesKernelModel compares the program with the model on
// random policy sets and packets, hostile shapes included (wireguard-go's
// allowedips_rand approach). The seed is logged; a failure prints it with
// the packet and both answers.
func TestClassifierMatchesKernelModel(t *testing.T) {
	e := newTestEnv(t)
	seed := modelSeed(t)
	rounds := modelRounds(t, 40)
	const policies, packets = 24, 80
	seen := map[Reason]int{}
	for round := 0; round < rounds; round++ {
		r := rand.New(rand.NewSource(seed + int64(round)))
		v6 := round%2 == 1
		inboundOK := round%3 == 0
		e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB, InboundForward: inboundOK})
		s := randomSnapshot(r, v6, policies, e.wan)
		s.FwdDefaultBlock = round%5 == 4
		e.apply(s)
		offloadDev := func(p *xfrm.Policy) int { return packetOffloadDevice(p, s.States) }
		for i := 0; i < packets; i++ {
			pkt, inbound := randomPacket(r, v6)
			g := modelGateway{ingress: e.lan, ingressMAC: e.lanMAC, inboundOK: inboundOK, offloadDev: offloadDev,
				own: []netip.Addr{addr("10.0.0.254"), addr("123.0.0.1"), addr("10.9.0.254")}, routeOf: e.routeOf}
			if inbound {
				g.ingress, g.ingressMAC = e.wan, e.wanMAC
			}
			frame, shape := hostile(r, pkt, v6, g.ingressMAC)
			want := modelDecide(s, frame, g)
			got := e.explainFrame(frame, g.ingress)
			seen[got.Reason]++
			if got.Reason != want {
				t.Fatalf("seed %d round %d packet %d (%s): %s -> %s proto %d ports %d/%d type %d ttl %d on %s: program says %s (policy %d), model says %s\nframe % x\npolicies:\n%s",
					seed, round, i, shape, pkt.Src, pkt.Dst, pkt.Proto, pkt.SPort, pkt.DPort, pkt.ICMPType, pkt.TTL,
					map[bool]string{true: "wan", false: "lan"}[inbound], got.ReasonName, got.PolicyIndex, want, frame, describe(s.Policies))
			}
		}
	}

	// A generator that stopped producing some outcome would make this
	// test pass without testing: demand every outcome.
	if rounds >= 40 {
		for _, r := range []Reason{ReasonForwardOut, ReasonForwardIn, ReasonNoPolicy, ReasonBlock, ReasonUncertain,
			ReasonNotOffloaded, ReasonFwdCheck, ReasonInbound, ReasonTTL, ReasonL2NotOurs, ReasonBadIPHeader,
			ReasonMartian, ReasonICMPError} {
			if seen[r] == 0 {
				t.Errorf("no random packet produced %s: %v", r, seen)
			}
		}
	}
	t.Logf("outcomes: %v", seen)
}

func describe(ps []xfrm.Policy) string {
	out := ""
	for _, p := range ps {
		off := 0
		if p.Offload != nil {
			off = p.Offload.Ifindex
		}
		opt := len(p.Tmpls) > 0 && p.Tmpls[0].Optional
		out += fmt.Sprintf("  %d %s %s -> %s proto %d sport %d/%#x dport %d/%#x prio %d action %d mark %d/%#x offload %d optional %v sub %v\n",
			p.Index, p.Dir, p.Sel.Src, p.Sel.Dst, p.Sel.Proto, p.Sel.SPort, p.Sel.SPortMask, p.Sel.DPort, p.Sel.DPortMask,
			p.Priority, p.Action, p.Mark, p.MarkMask, off, opt, p.Sub)
	}
	return out
}
