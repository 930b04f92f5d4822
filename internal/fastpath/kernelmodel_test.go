// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"fmt"
	"maps"
	"math/rand"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// The kernel against the model and the program. Random policy sets (SUB
// and MAIN, marks, ports, block and allow, both families) are installed
// with `ip xfrm policy` in the test gateway's namespace; real frames,
// hostile shapes included, go in through the LAN or WAN veth; which
// policies the kernel used is read back from their use time (`ip -s xfrm
// policy`: "use -" until a lookup picks the policy), after reinstalling
// the set before each frame so that only that frame's lookups show.
//
// Two checks per frame:
//   - the kernel used exactly the policies kernelStamps predicts (the
//     model of the kernel's forwarding path: receive checks, FWD check
//     with SUB first and the ICMP quoted-packet lookup, TTL, OUT lookup);
//   - whatever the program decided with certainty agrees with the kernel:
//     a policy it names as deciding (forward or block) is one the kernel
//     used, and a frame it leaves to the kernel as dropped before XFRM
//     (l2-not-ours, bad-ip-header, IPv4 martian) made the kernel use none.
//
// The host kernel has no ESP, so OUT allow policies are installed without
// templates (the kernel forwards in clear and stamps them; with a template
// and no SA it gives up before stamping); the program sees them with their
// templates and packet offload, as on a real gateway. Selector port masks
// other than none/all cannot be written with ip(8) and are left out here
// (TestClassifierMatchesKernelModel covers them against the model).

// kernelStamps predicts which policies the kernel's forwarding path uses
// for frame, or ok=false when the model cannot say (a tie the kernel
// breaks by insertion order, or an IPv6 martian, whose drop comes after
// the XFRM checks in ip6_forward).
func kernelStamps(s Snapshot, frame []byte, own []netip.Addr, ingressMAC []byte) (stamps map[uint32]bool, ok, preXFRM bool) {
	stamps = map[uint32]bool{}
	p, r := modelParse(frame)
	switch r {
	case parseOK, Reason(fastpathFpReasonFP_R_IKE), Reason(fastpathFpReasonFP_R_NOT_IP):
	default:
		return stamps, true, true // dropped by ip_rcv/ip6_rcv or before routing
	}
	if string(p.dmac) != string(ingressMAC) {
		return stamps, true, true // not PACKET_HOST: ip_rcv / ip_forward drop it
	}
	if modelMartian(p) || (!p.v6 && containsAddr(own, p.src)) {
		if p.v6 {
			return nil, false, false
		}
		return stamps, true, true // ip_route_input_slow / fib_validate_source
	}
	look := func(dir xfrm.Dir, q modelPkt, sub bool) (*xfrm.Policy, bool) {
		b := modelLookupType(s.Policies, dir, q, marksKernel, sub)
		return b.pol, !b.uncertain
	}
	lookup := func(dir xfrm.Dir, q modelPkt) (*xfrm.Policy, bool) {
		if pol, sure := look(dir, q, true); pol != nil {
			return pol, sure
		}
		return look(dir, q, false)
	}
	// FWD check (__xfrm_policy_check), then its ICMP error fallback.
	fwd, sure := lookup(xfrm.DirFwd, p)
	if fwd == nil && p.icmpErr {
		if q, qok := p.quoted(); qok {
			q.src, q.dst = q.dst, q.src
			if q.proto != 1 && q.proto != 58 {
				q.sport, q.dport = q.dport, q.sport
			}
			fwd, sure = lookup(xfrm.DirFwd, q)
		}
	}
	if !sure {
		return nil, false, false
	}
	pass := true
	if fwd != nil {
		pols := []*xfrm.Policy{fwd}
		if fwd.Sub { // the kernel adds the MAIN policy, looked up as IN
			m, msure := look(xfrm.DirIn, p, false)
			if !msure {
				return nil, false, false
			}
			if m != nil {
				pols = append(pols, m)
			}
		}
		for _, q := range pols {
			stamps[q.Index] = true
			if q.Action == xfrm.ActionBlock || requiresSA(q) {
				pass = false // no secpath: a required template fails
			}
		}
	}
	if !pass || p.ttl <= 1 {
		return stamps, true, false
	}
	// OUT lookup (__xfrm_route_forward -> xfrm_lookup).
	out, sure := lookup(xfrm.DirOut, p)
	if !sure {
		return nil, false, false
	}
	if out != nil {
		stamps[out.Index] = true
		if out.Sub && out.Action == xfrm.ActionAllow { // xfrm_expand_policies
			m, msure := look(xfrm.DirOut, p, false)
			if !msure {
				return nil, false, false
			}
			if m != nil {
				stamps[m.Index] = true
			}
		}
	}
	return stamps, true, false
}

func containsAddr(as []netip.Addr, a netip.Addr) bool {
	for _, b := range as {
		if a == b {
			return true
		}
	}
	return false
}

// ipXfrmAdd is the `ip xfrm policy add` line for p; OUT allow policies go
// without their template (see above).
func ipXfrmAdd(p xfrm.Policy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "xfrm policy add src %s dst %s", p.Sel.Src, p.Sel.Dst)
	switch p.Sel.Proto {
	case 0:
	case 1, 58:
		fmt.Fprintf(&b, " proto %d", p.Sel.Proto)
		if p.Sel.SPortMask != 0 {
			fmt.Fprintf(&b, " type %d", p.Sel.SPort)
		}
	default:
		fmt.Fprintf(&b, " proto %d", p.Sel.Proto)
		if p.Sel.SPortMask != 0 {
			fmt.Fprintf(&b, " sport %d", p.Sel.SPort)
		}
		if p.Sel.DPortMask != 0 {
			fmt.Fprintf(&b, " dport %d", p.Sel.DPort)
		}
	}
	fmt.Fprintf(&b, " dir %s index %d priority %d ptype %s", p.Dir, p.Index, p.Priority, map[bool]string{false: "main", true: "sub"}[p.Sub])
	if p.Mark != 0 || p.MarkMask != 0 {
		fmt.Fprintf(&b, " mark %d mask %d", p.Mark, p.MarkMask)
	}
	if p.Action == xfrm.ActionBlock {
		b.WriteString(" action block")
	} else if p.Dir != xfrm.DirOut {
		for _, t := range p.Tmpls {
			fmt.Fprintf(&b, " tmpl src %s dst %s proto esp mode tunnel level %s", t.Src, t.Dst, map[bool]string{false: "required", true: "use"}[t.Optional])
		}
	}
	return b.String()
}

// kernelPolicySet installs a policy set in the namespace, replacing what was
// there, and returns the indexes the kernel took (it refuses a second
// policy with the same selector, direction, type and mark).
func (e *testEnv) kernelPolicySet(pols []xfrm.Policy) map[uint32]bool {
	e.t.Helper()
	script := "xfrm policy flush\nxfrm policy flush ptype sub\n"
	for _, p := range pols {
		script += ipXfrmAdd(p) + "\n"
	}
	cmd := exec.Command("ip", "-n", e.name, "-force", "-batch", "-")
	cmd.Stdin = strings.NewReader(script)
	cmd.Run() // refused duplicates are expected; what was taken is read back
	_, all := e.kernelPolicyUse()
	return all
}

var (
	reIndex = regexp.MustCompile(`\bindex (\d+)\b`)
	reUse   = regexp.MustCompile(`\buse (\S+)`)
)

// kernelPolicyUse reads which policies a lookup has picked since they were
// installed, and all installed indexes.
func (e *testEnv) kernelPolicyUse() (used, all map[uint32]bool) {
	e.t.Helper()
	out, err := exec.Command("ip", "-n", e.name, "-s", "xfrm", "policy", "list").CombinedOutput()
	if err != nil {
		e.t.Fatalf("ip xfrm policy list: %v\n%s", err, out)
	}
	used, all = map[uint32]bool{}, map[uint32]bool{}
	var cur uint32
	for _, line := range strings.Split(string(out), "\n") {
		if m := reIndex.FindStringSubmatch(line); m != nil && strings.Contains(line, "dir ") {
			n, _ := strconv.ParseUint(m[1], 10, 32)
			cur = uint32(n)
			all[cur] = true
		}
		if m := reUse.FindStringSubmatch(line); m != nil && strings.Contains(line, "add ") && m[1] != "-" {
			used[cur] = true
		}
	}
	return used, all
}

// send puts frame on the wire of the veth peer of ifname, so that it
// arrives on ifname as from another host.
func (e *testEnv) send(ifname string, frame []byte) {
	e.t.Helper()
	e.in(func() {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			e.t.Fatal(err)
		}
		defer unix.Close(fd)
		var idx int
		if idx, err = ifindexOf(ifname + "p"); err != nil {
			e.t.Fatal(err)
		}
		if err := unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: idx}); err != nil {
			e.t.Fatalf("sending on %sp: %v", ifname, err)
		}
	})
}

func ifindexOf(name string) (int, error) {
	li, err := kernel.Link(name)
	if err != nil {
		return 0, err
	}
	return li.Ifindex, nil
}

// forKernelTest adapts a random policy to this test: only the port masks
// ip(8) writes, and no /0 selector sides. The latter keeps the kernel's own
// ICMP errors (time exceeded, redirects: sent from the gateway's addresses
// to the senders) from matching OUT policies and showing up as used.
func forKernelTest(p xfrm.Policy) xfrm.Policy {
	v6 := p.Sel.Src.Addr().Is6()
	lan, rem := pfx("10.0.0.0/8"), pfx("48.0.0.0/8")
	if v6 {
		lan, rem = pfx("fd00::/16"), pfx("2001:db8:48::/48")
	}
	if p.Dir != xfrm.DirOut {
		lan, rem = rem, lan
	}
	if p.Sel.Src.Bits() == 0 {
		p.Sel.Src = lan
	}
	if p.Sel.Dst.Bits() == 0 {
		p.Sel.Dst = rem
	}
	if p.Sel.SPortMask != 0 && p.Sel.SPortMask != 0xffff {
		p.Sel.SPort, p.Sel.SPortMask = 0, 0
	}
	if p.Sel.DPortMask != 0 && p.Sel.DPortMask != 0xffff {
		p.Sel.DPort, p.Sel.DPortMask = 0, 0
	}
	return p
}

func TestKernelAgreesWithModelAndProgram(t *testing.T) {
	e := newTestEnv(t)
	seed := modelSeed(t)
	rounds := modelRounds(t, 8)
	const policies, packets = 16, 24
	own := []netip.Addr{addr("10.0.0.254"), addr("123.0.0.1"), addr("10.9.0.254")}
	checked, skipped, forwards := 0, 0, 0
	for round := 0; round < rounds; round++ {
		r := rand.New(rand.NewSource(seed + int64(round)))
		v6 := round%2 == 1
		e.setIfaces(Iface{Ifindex: e.lan, L2: L2FIB}, Iface{Ifindex: e.wan, L2: L2FIB})
		s := randomSnapshot(r, v6, policies, e.wan)
		for i := range s.Policies {
			s.Policies[i] = forKernelTest(s.Policies[i])
		}
		taken := e.kernelPolicySet(s.Policies)
		var kept []xfrm.Policy
		for _, p := range s.Policies {
			if taken[p.Index] {
				kept = append(kept, p)
			}
		}
		if len(kept) == 0 {
			t.Fatalf("seed %d round %d: the kernel took none of the policies:\n%s", seed, round, describe(s.Policies))
		}
		s.Policies = kept
		e.apply(s)
		for i := 0; i < packets; i++ {
			pkt, inbound := randomPacket(r, v6)
			ingress, ifname, mac := e.lan, "lan0", e.lanMAC
			if inbound {
				ingress, ifname, mac = e.wan, "wan0", e.wanMAC
			}
			frame, shape := hostile(r, pkt, v6, mac)
			want, known, preXFRM := kernelStamps(s, frame, own, mac)
			if i > 0 {
				e.kernelPolicySet(s.Policies) // fresh use times
			}
			e.send(ifname, frame)
			got := e.waitKernelUse(want)
			d := e.explainFrame(frame, ingress)
			where := fmt.Sprintf("seed %d round %d packet %d (%s): %s -> %s proto %d ports %d/%d type %d ttl %d on %s\nframe % x\npolicies:\n%s",
				seed, round, i, shape, pkt.Src, pkt.Dst, pkt.Proto, pkt.SPort, pkt.DPort, pkt.ICMPType, pkt.TTL, ifname, frame, describe(s.Policies))
			if known {
				checked++
				if fmt.Sprint(sortedKeys(got)) != fmt.Sprint(sortedKeys(want)) {
					t.Fatalf("%s\nthe kernel used policies %v, the model says %v", where, sortedKeys(got), sortedKeys(want))
				}
			} else {
				skipped++
			}
			switch {
			case (d.Reason.Forwarded() || d.PolicyIndex != 0 && d.Reason != ReasonUncertain && !preXFRM) && (d.Dir == "out" || d.Dir == "fwd"):
				// A policy the program forwards by, or is certain
				// decides, decides in the kernel too (IN policies are
				// not consulted for forwarded packets). A frame the
				// kernel drops before XFRM (own IPv4 source, which the
				// program checks only before a forward) names one
				// without the kernel using it.
				forwards++
				if !got[d.PolicyIndex] {
					t.Fatalf("%s\nthe program says %s by policy %d; the kernel used %v", where, d.ReasonName, d.PolicyIndex, sortedKeys(got))
				}
			case d.Reason == ReasonL2NotOurs || d.Reason == ReasonBadIPHeader || d.Reason == ReasonMartian && !v6:
				if len(got) != 0 {
					t.Fatalf("%s\nthe program says %s (the kernel drops it before XFRM); the kernel used %v", where, d.ReasonName, sortedKeys(got))
				}
			}
		}
	}
	t.Logf("%d frames checked against the kernel, %d the model cannot predict (ties, IPv6 martians); %d certain program decisions named a policy", checked, skipped, forwards)
	if checked == 0 || forwards == 0 {
		t.Fatal("the generator produced nothing the kernel check could compare")
	}
}

// waitKernelUse reads the kernel's policy use until it shows want (frames
// are processed in softirq, shortly after the send) or a few tries passed.
func (e *testEnv) waitKernelUse(want map[uint32]bool) map[uint32]bool {
	var got map[uint32]bool
	for try := 0; try < 5; try++ {
		got, _ = e.kernelPolicyUse()
		if fmt.Sprint(sortedKeys(got)) == fmt.Sprint(sortedKeys(want)) && (len(want) > 0 || try >= 1) {
			break
		}
		unix.Nanosleep(&unix.Timespec{Nsec: 2e6}, nil)
	}
	return got
}

func sortedKeys(m map[uint32]bool) []uint32 {
	return slices.Sorted(maps.Keys(m))
}
