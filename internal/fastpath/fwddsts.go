// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"encoding/binary"
	"fmt"
)

// The fwd_dsts map (see bpf/fastpath.c): per family, one bit per value of
// a destination's first dstBits bits that some forwardable policy's
// destination selector covers. A packet whose bit is clear is passed right
// after parsing; a set bit sends it on to the full decision. It mirrors
// FP_DST_BITS and FP_DST_WORDS in bpf/fastpath.h.
const (
	dstBits  = 24
	dstWords = 1 << (dstBits - 6) // 64-bit words per family
)

// dstSets are the destination bits of one policy set: fwd for the allow
// OUT policies whose SA is packet-offloaded, in for the IN and FWD
// policies that would be forwardable on an interface with inbound
// forwarding, all for every policy. Uncertain policies are left out of fwd
// and in: the program passes every packet they decide.
type dstSets struct{ fwd, in, all []uint64 }

func forwardableDsts(t *Tables) dstSets {
	s := dstSets{fwd: make([]uint64, 2*dstWords), in: make([]uint64, 2*dstWords), all: make([]uint64, 2*dstWords)}
	for k, e := range t.Entries {
		fam := int(k.Family & 1)
		if int(k.Tuple) >= len(t.Tuples[fam]) {
			continue
		}
		plen := int(t.Tuples[fam][k.Tuple].DstPlen)
		for dir := 0; dir < 3; dir++ {
			pol := &e.Dir[dir]
			if e.Present&(1<<dir) == 0 {
				continue
			}
			setDstBits(s.all, fam, k.Dst[0], plen)
			if pol.Action != 0 || pol.OffloadIfindex == 0 || pol.Flags&flagUncertain != 0 {
				continue
			}
			bm := s.in
			if dir == 1 {
				bm = s.fwd
			}
			setDstBits(bm, fam, k.Dst[0], plen)
		}
	}
	return s
}

// setDstBits sets the bits of every value of the first dstBits bits that a
// destination prefix of length plen starting with word0 (network order, as
// the bpf2go types hold it) covers.
func setDstBits(bm []uint64, fam int, word0 uint32, plen int) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], word0)
	top := binary.BigEndian.Uint32(b[:]) >> (32 - dstBits)
	n := uint32(1)
	if plen < dstBits {
		n = 1 << (dstBits - plen)
		top &^= n - 1
	}
	base := fam * dstWords
	for v := top; v < top+n; {
		if v&63 == 0 && top+n-v >= 64 {
			bm[base+int(v>>6)] = ^uint64(0)
			v += 64
			continue
		}
		bm[base+int(v>>6)] |= 1 << (v & 63)
		v++
	}
}

// want is what fwd_dsts should hold: the forwardable OUT destinations,
// the IN and FWD ones while some interface forwards inbound, and every
// policy's while per-policy counters are on: then every packet a policy
// may match takes the full decision and is counted against it, and only
// what no policy covers is passed quickly.
func (s dstSets) want(inbound, counters bool) []uint64 {
	if counters {
		return s.all
	}
	if inbound {
		return orWords(s.fwd, s.in)
	}
	return s.fwd
}

func orWords(a, b []uint64) []uint64 {
	c := make([]uint64, len(a))
	for i := range a {
		c[i] = a[i] | b[i]
	}
	return c
}

// loadDsts maps fwd_dsts and reads what it holds (a previous daemon's
// bits, when the map was adopted), once. Call with dp.mu held.
func (dp *Datapath) loadDsts() error {
	if dp.dstMem != nil {
		return nil
	}
	mem, err := dp.objs.FwdDsts.Memory()
	if err != nil {
		return fmt.Errorf("fastpath: mapping fwd_dsts: %w", err)
	}
	cur := make([]byte, 8*2*dstWords)
	if _, err := mem.ReadAt(cur, 0); err != nil {
		return fmt.Errorf("fastpath: reading fwd_dsts: %w", err)
	}
	dp.dsts = make([]uint64, 2*dstWords)
	for i := range dp.dsts {
		dp.dsts[i] = binary.LittleEndian.Uint64(cur[8*i:])
	}
	dp.dstMem = mem
	return nil
}

// writeDsts makes fwd_dsts hold want, writing in place only the words
// that differ from what it holds. Call with dp.mu held. A word may be
// written a byte at a time; that is harmless, because callers only ever
// grow the map to a superset of both states (before a generation flip)
// or shrink it from one (after).
func (dp *Datapath) writeDsts(want []uint64) error {
	if err := dp.loadDsts(); err != nil {
		return err
	}
	var w [8]byte
	for i, v := range want {
		if dp.dsts[i] == v {
			continue
		}
		binary.LittleEndian.PutUint64(w[:], v)
		if _, err := dp.dstMem.WriteAt(w[:], int64(8*i)); err != nil {
			return fmt.Errorf("fastpath: writing fwd_dsts: %w", err)
		}
		dp.dsts[i] = v
	}
	return nil
}

// setDstFlags is SetIfaces' and SetCounters' part: fwd_dsts holds the IN
// and FWD destinations while some interface forwards inbound, and every
// OUT destination while counters are on. Call it before the interfaces
// are written when inbound forwarding turns on, after when it turns off,
// so the map never lacks a bit the interfaces could use.
func (dp *Datapath) setDstFlags(change func(inbound, counters *bool)) error {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	change(&dp.inboundAny, &dp.countersOn)
	if dp.dstSets.fwd == nil {
		return nil // no tables applied yet: nothing to forward
	}
	return dp.writeDsts(dp.dstSets.want(dp.inboundAny, dp.countersOn))
}

// withTop8 returns t's tuples with their address summaries filled in
// (Compile calls it last): bit v of src_top8 (dst_top8) is set when some
// entry of the tuple has a source (destination) prefix covering
// first-8-bit value v. The program skips a tuple whose summaries miss the
// packet's addresses: no entry of it can match.
func withTop8(t *Tables) [2][]fastpathFpTuple {
	var out [2][]fastpathFpTuple
	for fam := range out {
		out[fam] = append([]fastpathFpTuple(nil), t.Tuples[fam]...)
		for i := range out[fam] {
			out[fam][i].SrcTop8, out[fam][i].DstTop8 = [4]uint64{}, [4]uint64{}
		}
	}
	for k := range t.Entries {
		fam := int(k.Family & 1)
		if int(k.Tuple) >= len(out[fam]) {
			continue
		}
		tu := &out[fam][k.Tuple]
		setTop8(&tu.SrcTop8, k.Src[0], int(tu.SrcPlen))
		setTop8(&tu.DstTop8, k.Dst[0], int(tu.DstPlen))
	}
	return out
}

// setTop8 sets the bits of the first-8-bit values a prefix of length plen
// starting with word0 (network order, as the bpf2go types hold it) covers.
func setTop8(sum *[4]uint64, word0 uint32, plen int) {
	top := uint32(byte(word0)) // the first byte of the address
	n := uint32(1)
	if plen < 8 {
		n = 1 << (8 - plen)
		top &^= n - 1
	}
	for v := top; v < top+n; v++ {
		sum[v>>6] |= 1 << (v & 63)
	}
}
