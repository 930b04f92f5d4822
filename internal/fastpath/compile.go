// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sort"

	"sluice/internal/kernel/xfrm"
)

// MaxTuples is how many distinct selector shapes (prefix lengths, protocol,
// port masks) per address family the program searches. It mirrors
// FP_MAX_TUPLES in bpf/fastpath.h.
const MaxTuples = 64

// Snapshot is the kernel state the fast path mirrors.
type Snapshot struct {
	Policies        []xfrm.Policy
	States          []xfrm.State
	FwdDefaultBlock bool // `ip xfrm policy setdefault fwd block`
	// RouteMTU is the MTU of the route under each SA (from the SA's source
	// to its destination; see kernel.RouteMTUAt), from which Compile
	// computes the SA's MTU. An SA without an entry has no known MTU and
	// the fast path forwards nothing through it.
	RouteMTU map[Endpoints]int
	// Quirks says how each offload device (by ifindex) departs from the
	// kernel's XFRM; a device without an entry has none.
	Quirks map[int]DeviceQuirks
}

// Endpoints are an SA's outer addresses.
type Endpoints struct{ Src, Dst netip.Addr }

// Tables is a compiled snapshot, ready to be written to the maps.
type Tables struct {
	Tuples  [2][]fastpathFpTuple // per family (0 = IPv4, 1 = IPv6)
	Entries map[fastpathFpPkey]fastpathFpPentry
	// Mirrored counts the policies that can match traffic the program sees.
	Mirrored        int
	FwdDefaultBlock bool
	// Didx is the IPv4 destination index (didx.go), a first stage that
	// decides without the tuples where one entry alone meets a /24.
	Didx didx
	// SARefs are the SAs each packet-offloaded OUT policy (by kernel
	// index) resolves to, for the program's SA check (sa_refs).
	SARefs map[uint32]fastpathFpSaRef
	// DeviceMisses are the OUT policies whose packets the program hands
	// to the kernel because their offload device would send some of them
	// in cleartext (device-miss). The kernel hands them to the same
	// device: the mirror announces each (Mirror.announceDeviceMisses).
	DeviceMisses []DeviceMiss
}

// DeviceMiss is one policy of Tables.DeviceMisses and the ifindex of the
// device that offloads it.
type DeviceMiss struct {
	Policy  xfrm.Policy
	Ifindex int
}

// ErrTooManyShapes means the policy set has more distinct selector shapes
// than the program searches; the control plane then keeps the fast path
// out of the way (everything to the kernel) instead of guessing.
type ErrTooManyShapes struct {
	Family string
	Shapes int
}

func (e *ErrTooManyShapes) Error() string {
	return fmt.Sprintf("%s policies use %d distinct selector shapes (prefix lengths, protocol, port masks); the fast path searches at most %d, so it passes all traffic to the kernel", e.Family, e.Shapes, MaxTuples)
}

type shape struct {
	srcLen, dstLen int
	protoSet       bool
	sportMask      uint16
	dportMask      uint16
}

func familyOf(sel xfrm.Selector) int {
	if sel.Src.Addr().Is6() || sel.Dst.Addr().Is6() {
		return 1
	}
	return 0
}

// Compile turns the kernel's policies and SAs into fast-path tables.
func Compile(s Snapshot) (*Tables, error) {
	t := &Tables{Entries: map[fastpathFpPkey]fastpathFpPentry{}, FwdDefaultBlock: s.FwdDefaultBlock,
		SARefs: map[uint32]fastpathFpSaRef{}}
	shapeIndex := [2]map[shape]int{{}, {}}
	var shapes [2][]shape
	minPrio := [2][]([3]uint32){}

	type placed struct {
		key fastpathFpPkey
		dir xfrm.Dir
		val fastpathFpPolicy
	}
	var all []placed
	bySA := bucketStates(s.States)
	for i := range s.Policies {
		p := &s.Policies[i]
		if p.Dir > xfrm.DirFwd {
			// Directions 3 and 4 are per-socket policies (charon's IKE
			// bypass): they apply to their own socket's packets only,
			// never to forwarded traffic.
			continue
		}
		fam := familyOf(p.Sel)
		sh := shape{
			srcLen: p.Sel.Src.Bits(), dstLen: p.Sel.Dst.Bits(), protoSet: p.Sel.Proto != 0,
			sportMask: p.Sel.SPortMask, dportMask: p.Sel.DPortMask,
		}
		ti, ok := shapeIndex[fam][sh]
		if !ok {
			ti = len(shapes[fam])
			shapeIndex[fam][sh] = ti
			shapes[fam] = append(shapes[fam], sh)
			minPrio[fam] = append(minPrio[fam], [3]uint32{^uint32(0), ^uint32(0), ^uint32(0)})
		}
		if prio := effectivePriority(p); prio < minPrio[fam][ti][p.Dir] {
			minPrio[fam][ti][p.Dir] = prio
		}
		val := policyValue(p, bySA.candidates(p), s.RouteMTU)
		if val.OffloadIfindex != 0 && deviceMiss(p, s.Quirks[int(val.OffloadIfindex)]) {
			val.Flags |= flagDeviceMiss
			t.DeviceMisses = append(t.DeviceMisses, DeviceMiss{Policy: *p, Ifindex: int(val.OffloadIfindex)})
		}
		if val.OffloadIfindex != 0 && p.Dir == xfrm.DirOut {
			t.SARefs[p.Index] = saRefOf(p.Tmpls[0], bySA.candidates(p))
		}
		all = append(all, placed{key: policyKey(p, fam, ti), dir: p.Dir, val: val})
		t.Mirrored++
	}

	// Order tuples by their best priority so the program can stop early.
	var remap [2][]int
	for fam := 0; fam < 2; fam++ {
		n := len(shapes[fam])
		if n > MaxTuples {
			return nil, &ErrTooManyShapes{Family: [2]string{"IPv4", "IPv6"}[fam], Shapes: n}
		}
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		best := func(i int) uint32 {
			m := minPrio[fam][i]
			return min(m[0], m[1], m[2])
		}
		sort.SliceStable(order, func(a, b int) bool { return best(order[a]) < best(order[b]) })
		remap[fam] = make([]int, n)
		for newIdx, old := range order {
			remap[fam][old] = newIdx
			t.Tuples[fam] = append(t.Tuples[fam], tupleOf(shapes[fam][old], minPrio[fam][old], fam))
		}
		for newIdx, old := range order {
			for dir := 0; dir < 3; dir++ {
				if minPrio[fam][old][dir] != ^uint32(0) {
					t.Tuples[fam][newIdx].Dirs |= 1 << dir
				}
			}
		}
	}

	for _, pl := range all {
		pl.key.Tuple = uint8(remap[pl.key.Family][pl.key.Tuple])
		e := t.Entries[pl.key]
		bit := uint32(1) << pl.dir
		prev := &e.Dir[pl.dir]
		switch {
		case e.Present&bit == 0 || pl.val.Priority < prev.Priority:
			*prev = pl.val
			e.Present |= bit
		case pl.val.Priority == prev.Priority:
			// Same selector, same priority: the kernel's order between
			// them is not ours to guess.
			prev.Flags |= flagUncertain
		}
		t.Entries[pl.key] = e
	}
	t.Tuples = withTop8(t) // the address summaries (fwddsts.go)
	t.Didx = buildDidx(t)
	return t, nil
}

const (
	flagUncertain    = 1 << 0 // FP_F_UNCERTAIN
	flagTmplRequired = 1 << 1 // FP_F_TMPL_REQUIRED
	flagDeviceMiss   = 1 << 2 // FP_F_DEVICE_MISS
)

// uncertain reports policies whose match depends on what XDP cannot see.
// A mark value with bits outside its mask counts too: 6.18 stores value &
// mask (so the policy matches like its masked value), while a kernel that
// stores the value as given never matches it; either way the kernel
// decides.
func uncertain(p *xfrm.Policy) bool {
	return p.MarkMask != 0 || p.Mark != 0 || p.IfID != 0 || p.Sel.Ifindex != 0 || p.Sub || p.SecCtx || p.Unconfirmed ||
		p.UnknownAttr != 0 // an XFRM attribute newer than sluice (xfrm.Policy.UnknownAttr)
}

// effectivePriority is the priority a policy competes with. The kernel
// looks up SUB-type policies before MAIN ones, whatever their priorities
// (xfrm_policy_lookup): a SUB match wins outright. SUB policies are also
// uncertain, so giving them the best priority sends every packet one of
// them matches to the kernel, and no MAIN policy is ever named for it.
func effectivePriority(p *xfrm.Policy) uint32 {
	if p.Sub {
		return 0
	}
	return p.Priority
}

func policyKey(p *xfrm.Policy, fam, tuple int) fastpathFpPkey {
	k := fastpathFpPkey{Family: uint8(fam), Tuple: uint8(tuple), Proto: p.Sel.Proto}
	k.Sport = htons(p.Sel.SPort & p.Sel.SPortMask)
	k.Dport = htons(p.Sel.DPort & p.Sel.DPortMask)
	k.Src = addrWords(p.Sel.Src.Masked().Addr())
	k.Dst = addrWords(p.Sel.Dst.Masked().Addr())
	return k
}

func policyValue(p *xfrm.Policy, states []xfrm.State, routeMTU map[Endpoints]int) fastpathFpPolicy {
	v := fastpathFpPolicy{Priority: effectivePriority(p), Index: p.Index, Action: uint8(p.Action)}
	if uncertain(p) {
		v.Flags |= flagUncertain
	}
	for _, tm := range p.Tmpls {
		if !tm.Optional {
			v.Flags |= flagTmplRequired
		}
	}
	if p.Action == xfrm.ActionAllow {
		v.OffloadIfindex = uint32(packetOffloadDevice(p, states))
	}
	if v.OffloadIfindex != 0 && p.Dir == xfrm.DirOut {
		v.SaMtu = uint16(saMTU(p.Tmpls[0], states, routeMTU))
	}
	return v
}

// packetOffloadDevice returns the device that packet-offloads every SA the
// policy's template can resolve to, or 0. Only a single tunnel-mode ESP
// template qualifies: with several templates, transport mode (whose SA
// depends on each packet's destination) or SAs on different devices, the
// kernel's choice is not certain here, so the kernel keeps the packet.
func packetOffloadDevice(p *xfrm.Policy, states []xfrm.State) int {
	if len(p.Tmpls) != 1 || !p.Offload.Packet() {
		return 0
	}
	tm := p.Tmpls[0]
	if tm.Mode != xfrm.ModeTunnel || tm.Proto != xfrm.ProtoESP {
		return 0
	}
	wantInbound := p.Dir != xfrm.DirOut
	if p.Offload.Inbound() != wantInbound {
		return 0
	}
	dev := 0
	for i := range states {
		st := &states[i]
		if !tmplMatches(tm, st) {
			continue
		}
		if !st.Offload.Packet() || st.Offload.Inbound() != wantInbound || !selCovers(st, p) ||
			st.FastPathRefusal(p.Dir) != "" { // IP-TFS, per-CPU, SA direction (refusal.go)
			return 0
		}
		if dev != 0 && dev != st.Offload.Ifindex {
			return 0
		}
		dev = st.Offload.Ifindex
	}
	if dev != p.Offload.Ifindex {
		return 0
	}
	return dev
}

func tupleOf(sh shape, prio [3]uint32, fam int) fastpathFpTuple {
	t := fastpathFpTuple{
		MinPrio: prio, SrcPlen: uint8(sh.srcLen), DstPlen: uint8(sh.dstLen),
		SportMask: htons(sh.sportMask), DportMask: htons(sh.dportMask),
	}
	if sh.protoSet {
		t.ProtoSet = 1
	}
	bits := 32
	if fam == 1 {
		bits = 128
	}
	t.SrcMask = maskWords(sh.srcLen, bits)
	t.DstMask = maskWords(sh.dstLen, bits)
	return t
}

// Byte-order helpers: the program compares raw network-order words, and
// bpf2go types hold them as little-endian host integers.
func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.LittleEndian.Uint16(b[:])
}

func addrWords(a netip.Addr) [4]uint32 {
	var w [4]uint32
	if a.Is4() {
		b := a.As4()
		w[0] = binary.LittleEndian.Uint32(b[:])
		return w
	}
	b := a.As16()
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return w
}

func maskWords(plen, bits int) [4]uint32 {
	var b [16]byte
	for i := 0; i < plen && i < bits; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	var w [4]uint32
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return w
}
