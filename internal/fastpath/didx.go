// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"encoding/binary"
	"fmt"
	"slices"
	"unsafe"

	"github.com/cilium/ebpf"
)

// The destination index (didx_blocks, didx_slots, didx_rules4 in
// bpf/fastpath.c): a first classification stage for IPv4 that answers
// from three array loads whenever one policy-table entry alone meets the
// destination's /24. Sizes mirror FP_DIDX_L1, FP_DIDX_BLOCKS and
// FP_DIDX_RULES in bpf/fastpath.h.
const (
	didxL1     = 1 << 16 // one word per /16
	didxBlocks = 1024    // blocks of 256 /24 words, per generation
	didxRules  = 1 << 16 // rules per generation
	// didxMinPlen: an entry with a shorter destination prefix than this
	// meets more than 256 /24s; it gets no rule, and every /24 it meets
	// is left to the tuples.
	didxMinPlen = 16
)

// didx is one policy set's destination index, for one generation's half.
type didx struct {
	blocks []uint32      // didxL1 words: block number + 1 per /16, 0: none
	slots  [][256]uint32 // per block, per /24 of its /16: rule number + 1, 0: none
	rules  []fastpathFpDidx4
	// keys are the rules' entries in Tables.Entries: writeDidx copies
	// their values then, after Apply has given the policies their
	// counter slots.
	keys []fastpathFpPkey
}

// buildDidx indexes t's IPv4 entries by destination /24. A /24 gets a rule
// only when exactly one entry's destination prefix meets it, so that a
// packet to it can match no other entry: then the rule decides (match:
// that entry's policies; no match: none), exactly as the tuple search
// would. A /24 met by two entries, or by one whose destination prefix is
// shorter than didxMinPlen, gets none, nor does what does not fit the
// maps: the tuples decide those.
func buildDidx(t *Tables) didx {
	var keys []fastpathFpPkey // candidate entries
	var meets []uint64        // /24 (the address's first 24 bits) << 32 | candidate
	var wide [didxMinPlen]map[uint32]bool
	for k := range t.Entries {
		if k.Family != 0 || int(k.Tuple) >= len(t.Tuples[0]) {
			continue
		}
		plen := int(t.Tuples[0][k.Tuple].DstPlen)
		dst := beWord(k.Dst[0])
		if plen < didxMinPlen {
			if wide[plen] == nil {
				wide[plen] = map[uint32]bool{}
			}
			wide[plen][dst>>(32-plen)] = true
			continue
		}
		first, n := dst>>8, uint32(1)
		if plen < 24 {
			n = 1 << (24 - plen)
			first &^= n - 1
		}
		for v := first; v < first+n; v++ {
			meets = append(meets, uint64(v)<<32|uint64(len(keys)))
		}
		keys = append(keys, k)
	}
	// Sorted, the entries meeting one /24 sit side by side (and the
	// output does not depend on map order).
	slices.Sort(meets)
	x := didx{blocks: make([]uint32, didxL1)}
	rule := make([]uint32, len(keys)) // candidate -> rule number + 1
	for i := 0; i < len(meets); {
		v, c := uint32(meets[i]>>32), uint32(meets[i])
		j := i + 1
		for j < len(meets) && uint32(meets[j]>>32) == v {
			j++
		}
		alone := j == i+1
		i = j
		if !alone || coveredWide(&wide, v) {
			continue
		}
		b := x.blocks[v>>8]
		if b == 0 {
			if len(x.slots) == didxBlocks {
				continue
			}
			x.slots = append(x.slots, [256]uint32{})
			b = uint32(len(x.slots))
			x.blocks[v>>8] = b
		}
		if rule[c] == 0 {
			if len(x.rules) == didxRules {
				continue
			}
			k := keys[c]
			x.rules = append(x.rules, didxRule(k, t.Entries[k], &t.Tuples[0][k.Tuple]))
			x.keys = append(x.keys, k)
			rule[c] = uint32(len(x.rules))
		}
		x.slots[b-1][v&255] = rule[c]
	}
	return x
}

// coveredWide says whether a prefix shorter than didxMinPlen in wide meets
// /24 v.
func coveredWide(wide *[didxMinPlen]map[uint32]bool, v uint32) bool {
	for plen, set := range wide {
		if set != nil && set[v>>(24-plen)] {
			return true
		}
	}
	return false
}

func didxRule(k fastpathFpPkey, e fastpathFpPentry, tu *fastpathFpTuple) fastpathFpDidx4 {
	return fastpathFpDidx4{
		Src: k.Src[0], SrcMask: tu.SrcMask[0], Dst: k.Dst[0], DstMask: tu.DstMask[0],
		Sport: k.Sport, SportMask: tu.SportMask, Dport: k.Dport, DportMask: tu.DportMask,
		Proto: k.Proto, ProtoSet: tu.ProtoSet, E: e,
	}
}

// beWord is an address word as the bpf2go types hold it (network order
// read as little-endian) in host order.
func beWord(w uint32) uint32 {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], w)
	return binary.BigEndian.Uint32(b[:])
}

// didxMaps are the destination index's maps, mapped into memory once.
type didxMaps struct{ blocks, slots, rules *ebpf.Memory }

// writeDidx writes t's index into generation gen's half of the
// destination index: every /16 word (a stale block number from an older
// set must not stay), the blocks and rules it uses, each rule with its
// entry's value as t holds it now. Call with dp.mu held, before the flip.
func (dp *Datapath) writeDidx(gen uint32, t *Tables) error {
	x := t.Didx
	m := &dp.didxMem
	if m.blocks == nil {
		var err error
		if m.blocks, err = dp.objs.DidxBlocks.Memory(); err == nil {
			if m.slots, err = dp.objs.DidxSlots.Memory(); err == nil {
				m.rules, err = dp.objs.DidxRules4.Memory()
			}
		}
		if err != nil {
			*m = didxMaps{}
			return fmt.Errorf("fastpath: mapping the destination index: %w", err)
		}
	}
	// didx_blocks and didx_slots hold 256 words per value (struct
	// fp_didx_block, 1 KiB: no padding between values).
	g := int64(gen & 1)
	buf := make([]byte, 4*didxL1)
	for i, w := range x.blocks {
		binary.LittleEndian.PutUint32(buf[4*i:], w)
	}
	if _, err := m.blocks.WriteAt(buf, g*4*didxL1); err != nil {
		return fmt.Errorf("fastpath: writing the destination index: %w", err)
	}
	buf = make([]byte, 4*256*len(x.slots))
	for b := range x.slots {
		for i, w := range x.slots[b] {
			binary.LittleEndian.PutUint32(buf[4*(256*b+i):], w)
		}
	}
	if _, err := m.slots.WriteAt(buf, g*4*256*didxBlocks); err != nil {
		return fmt.Errorf("fastpath: writing the destination index: %w", err)
	}
	// An array's values are 8-byte aligned: a rule takes its size
	// rounded up. The bpf2go type has the C layout (structs.HostLayout).
	size := int(unsafe.Sizeof(fastpathFpDidx4{}))
	stride := (size + 7) &^ 7
	buf = make([]byte, stride*len(x.rules))
	for i, r := range x.rules {
		r.E = t.Entries[x.keys[i]]
		copy(buf[stride*i:], unsafe.Slice((*byte)(unsafe.Pointer(&r)), size))
	}
	if _, err := m.rules.WriteAt(buf, g*int64(stride)*didxRules); err != nil {
		return fmt.Errorf("fastpath: writing the destination index: %w", err)
	}
	return nil
}
