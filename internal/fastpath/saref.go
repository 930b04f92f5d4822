// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf/btf"

	"sluice/internal/kernel/xfrm"
)

// The SA check closes the SA-deletion window (docs/fastpath.md): before an
// outbound forward the program asks the kernel whether it still holds the
// policy's SA (bpf_xdp_get_xfrm_state, Linux 6.8+). These are its control
// plane: which SAs each policy needs (sa_refs, by counter slot) and the
// switch.

const (
	afInet  = 2
	afInet6 = 10
	// currentNetns is BPF_F_CURRENT_NETNS: the ingress device's namespace,
	// where the gateway's SAs are.
	currentNetns = -1
)

// saRefOf names the SAs template tm resolves to among states, for the
// program's lookup: at most FP_SA_REFS, the highest SPIs first (a
// deterministic choice; during a rekey both SAs fit). A policy whose SA the
// kernel holds under none of these names forwards nothing until the next
// generation names the one it has.
func saRefOf(tm xfrm.Tmpl, states []xfrm.State) fastpathFpSaRef {
	var ref fastpathFpSaRef
	var match []xfrm.State
	for i := range states {
		if tmplMatches(tm, &states[i]) {
			match = append(match, states[i])
		}
	}
	slices.SortFunc(match, func(a, b xfrm.State) int { return int(int64(b.SPI) - int64(a.SPI)) })
	for i := 0; i < len(ref.Sa) && i < len(match); i++ {
		st := &match[i]
		o := &ref.Sa[i]
		o.NetnsId = currentNetns
		o.Mark = st.Mark & st.MarkMask
		o.Daddr = addrWords(st.Dst)
		var spi [4]byte
		binary.BigEndian.PutUint32(spi[:], st.SPI)
		o.Spi = binary.LittleEndian.Uint32(spi[:])
		o.Proto = uint8(st.Proto)
		o.Family = afInet
		if st.Dst.Is6() {
			o.Family = afInet6
		}
	}
	return ref
}

// writeSARefs writes each counter slot's SAs for t (the slots assigned),
// before the flip: a packet of the old generation that reads a slot's new
// SAs reads those of the same policy. Only what changed is written; a slot
// whose policy left or stopped being forwardable is cleared (no SA: the
// program forwards nothing for it).
func (dp *Datapath) writeSARefs(t *Tables) error {
	want := map[uint32]fastpathFpSaRef{}
	for _, e := range t.Entries {
		for d := range e.Dir {
			pol := &e.Dir[d]
			if e.Present&(1<<d) == 0 || pol.Cslot == 0 {
				continue
			}
			if ref, ok := t.SARefs[pol.Index]; ok {
				want[pol.Cslot] = ref
			}
		}
	}
	for slot := range dp.saRefs {
		if _, ok := want[slot]; !ok {
			if err := dp.objs.SaRefs.Put(slot, fastpathFpSaRef{}); err != nil {
				return fmt.Errorf("fastpath: clearing the SAs of counter slot %d: %w", slot, err)
			}
			delete(dp.saRefs, slot)
		}
	}
	for slot, ref := range want {
		if old, ok := dp.saRefs[slot]; ok && old == ref {
			continue
		}
		if err := dp.objs.SaRefs.Put(slot, ref); err != nil {
			return fmt.Errorf("fastpath: writing the SAs of counter slot %d: %w", slot, err)
		}
		if dp.saRefs == nil {
			dp.saRefs = map[uint32]fastpathFpSaRef{}
		}
		dp.saRefs[slot] = ref
	}
	dp.saSlots = map[saID][]uint32{}
	for slot, ref := range dp.saRefs {
		for i := range ref.Sa {
			if ref.Sa[i].Family != 0 {
				id := idOf(&ref.Sa[i])
				dp.saSlots[id] = append(dp.saSlots[id], slot)
			}
		}
	}
	return nil
}

// SACheck is how the program checks, before an outbound forward, that the
// policy's SA still exists (docs/fastpath.md, "The SA-deletion window").
type SACheck uint32

const (
	// SACheckOff forwards a deleted SA's policy until the mirror's next
	// generation (a debounce and a compile: tens of milliseconds).
	SACheckOff = SACheck(fastpathFpSaCheckFP_SA_CHECK_OFF)
	// SACheckMirror forwards only while sa_refs names one of the policy's
	// SAs; the mirror withdraws a name as soon as the kernel announces the
	// SA's deletion (WithdrawSA). An inline load a forward.
	SACheckMirror = SACheck(fastpathFpSaCheckFP_SA_CHECK_MIRROR)
	// SACheckKernel also asks the kernel's SA table on every forward
	// (bpf_xdp_get_xfrm_state; SACheckSupported): no event latency, ~85 ns
	// a forward.
	SACheckKernel = SACheck(fastpathFpSaCheckFP_SA_CHECK_KERNEL)
)

// SetSACheck sets the SA check.
func (dp *Datapath) SetSACheck(c SACheck) error {
	return dp.updateConfig(func(cfg *fastpathFpConfig) bool {
		cfg.SaCheck = uint32(c)
		return true
	})
}

// saID names an SA as the program's lookup does (fastpathFpSaOpts).
type saID struct {
	daddr [4]uint32
	spi   uint32 // as stored: network order read little-endian
	proto uint8
}

func idOf(o *fastpathFpSaOpts) saID { return saID{o.Daddr, o.Spi, o.Proto} }

// WithdrawSA removes st from every policy's SAs in sa_refs at once, ahead
// of the next generation (the mirror calls it on the kernel's delete and
// hard-expire events): with SACheckMirror on, a policy left with no SA is
// forwarded no more. A later Apply writes what its tables say.
func (dp *Datapath) WithdrawSA(st *xfrm.State) error {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	ref := saRefOf(xfrm.Tmpl{Proto: st.Proto, Mode: st.Mode, Dst: st.Dst}, []xfrm.State{*st})
	id := idOf(&ref.Sa[0])
	for _, slot := range dp.saSlots[id] {
		cur, ok := dp.saRefs[slot]
		if !ok {
			continue
		}
		for i := range cur.Sa {
			if cur.Sa[i].Family != 0 && idOf(&cur.Sa[i]) == id {
				cur.Sa[i] = fastpathFpSaOpts{}
			}
		}
		if err := dp.objs.SaRefs.Put(slot, cur); err != nil {
			return fmt.Errorf("fastpath: withdrawing SA 0x%x from counter slot %d: %w", st.SPI, slot, err)
		}
		dp.saRefs[slot] = cur
	}
	return nil
}

// WithdrawAllSAs clears every policy's SAs (the kernel flushed its SAs).
func (dp *Datapath) WithdrawAllSAs() error {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	for slot := range dp.saRefs {
		if err := dp.objs.SaRefs.Put(slot, fastpathFpSaRef{}); err != nil {
			return fmt.Errorf("fastpath: withdrawing the SAs of counter slot %d: %w", slot, err)
		}
		dp.saRefs[slot] = fastpathFpSaRef{}
	}
	return nil
}

// SACheckSupported says whether the running kernel has the kfunc the SA
// check calls (bpf_xdp_get_xfrm_state, Linux 6.8+ with BTF). Without it
// the check would pass every packet to the kernel.
func SACheckSupported() (bool, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return false, fmt.Errorf("fastpath: reading the kernel's BTF for bpf_xdp_get_xfrm_state: %w", err)
	}
	var fn *btf.Func
	err = spec.TypeByName("bpf_xdp_get_xfrm_state", &fn)
	if errors.Is(err, btf.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
