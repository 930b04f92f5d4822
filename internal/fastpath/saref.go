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
		o.Proto = st.Proto
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
	return nil
}

// SetSACheck turns the SA check on or off (off: a deleted SA's policy is
// forwarded until the mirror's next generation, tens of milliseconds).
func (dp *Datapath) SetSACheck(on bool) error {
	return dp.updateConfig(func(cfg *fastpathFpConfig) bool {
		cfg.SaCheck = b2u(on)
		return true
	})
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
