// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
)

// maxCounterSlots mirrors FP_MAX_COUNTER_SLOTS: slots 1..maxCounterSlots-1
// count; slot 0 counts nothing.
const maxCounterSlots = 262144

// slotQuarantine is how long a released counter slot rests before another
// policy gets it: a packet decided under the generation that still held
// the old policy (or replayed from a cache entry of that generation just
// before the flip) may still add to it that late. A program run lasts
// microseconds; a second is a margin of six orders of magnitude.
const slotQuarantine = time.Second

// counterSlots gives each policy of the tables a dense counter slot, the
// index of its counters in policy_counts (a per-CPU array, so counting is
// an inline load in the program). A policy keeps its slot for as long as
// it is in the tables, across generations, so a recompile neither loses
// nor moves its counts. A slot released by a policy that left the tables
// is given to another only after an Apply later and slotQuarantine, and
// its counters are zeroed first, so a late packet of the old policy is
// never counted against the new one. The owners are also written to
// policy_slots, which readers go by and a restarted daemon adopts. Guarded
// by Datapath.mu (Apply).
type counterSlots struct {
	loaded  bool
	byIndex map[uint32]uint32 // kernel policy index -> slot
	next    uint32            // slots below next were given out at least once
	free    []freedSlot       // released, oldest first
	applies uint64
}

type freedSlot struct {
	slot  uint32
	apply uint64 // the Apply that released it
	at    time.Time
}

// load adopts the owners a previous daemon left in policy_slots.
func (cs *counterSlots) load(owners *ebpf.Map) error {
	if cs.loaded {
		return nil
	}
	cs.byIndex = map[uint32]uint32{}
	cs.next = 1
	idx, err := readSlotOwners(owners)
	if err != nil {
		return err
	}
	for slot, index := range idx {
		if slot > 0 && index != 0 {
			cs.byIndex[index] = uint32(slot)
			cs.next = max(cs.next, uint32(slot)+1)
		}
	}
	now := time.Now() // the old daemon's last packets: rest them too
	for slot := uint32(1); slot < cs.next; slot++ {
		if idx[slot] == 0 {
			cs.free = append(cs.free, freedSlot{slot: slot, at: now})
		}
	}
	cs.loaded = true
	return nil
}

// assign gives every policy in t a slot (its own if it had one) and writes
// it into the entries. It returns the slots newly given out, whose counters
// and owners the caller writes before the tables are published.
func (cs *counterSlots) assign(t *Tables, now time.Time) (fresh []uint32, owners []uint32) {
	cs.applies++
	for k, e := range t.Entries {
		for d := range e.Dir {
			if e.Present&(1<<d) == 0 || e.Dir[d].Index == 0 {
				continue
			}
			index := e.Dir[d].Index
			slot, ok := cs.byIndex[index]
			if !ok {
				slot = cs.take(now)
				if slot != 0 {
					cs.byIndex[index] = slot
					fresh, owners = append(fresh, slot), append(owners, index)
				}
			}
			e.Dir[d].Cslot = slot
		}
		t.Entries[k] = e
	}
	return fresh, owners
}

// take returns a slot for a new policy: a rested one, else one never used,
// else 0 (every slot taken: that policy is not counted).
func (cs *counterSlots) take(now time.Time) uint32 {
	if len(cs.free) > 0 {
		f := cs.free[0]
		if f.apply < cs.applies && now.Sub(f.at) >= slotQuarantine {
			cs.free = cs.free[1:]
			return f.slot
		}
	}
	if cs.next < maxCounterSlots {
		cs.next++
		return cs.next - 1
	}
	return 0
}

// release frees the slots of policies no longer in t (after its flip).
func (cs *counterSlots) release(t *Tables, now time.Time) []uint32 {
	live := make(map[uint32]bool, len(cs.byIndex))
	for _, e := range t.Entries {
		for d := range e.Dir {
			if e.Present&(1<<d) != 0 {
				live[e.Dir[d].Index] = true
			}
		}
	}
	var gone []uint32
	for index, slot := range cs.byIndex {
		if !live[index] {
			delete(cs.byIndex, index)
			cs.free = append(cs.free, freedSlot{slot: slot, apply: cs.applies, at: now})
			gone = append(gone, slot)
		}
	}
	return gone
}

// assignCounterSlots is Apply's first step: slots for t's policies, their
// counters zeroed and their owners recorded before any table names them.
func (dp *Datapath) assignCounterSlots(t *Tables, now time.Time) error {
	if err := dp.slots.load(dp.objs.PolicySlots); err != nil {
		return err
	}
	fresh, owners := dp.slots.assign(t, now)
	if len(fresh) == 0 {
		return nil
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	// in chunks: a zero per CPU per slot, for many CPUs, is a lot of memory at once
	const chunk = 4096
	zeros := make([]fastpathFpCounter, min(len(fresh), chunk)*ncpu)
	for i := 0; i < len(fresh); i += chunk {
		part := fresh[i:min(i+chunk, len(fresh))]
		if _, err := dp.objs.PolicyCounts.BatchUpdate(part, zeros[:len(part)*ncpu], nil); err != nil {
			return fmt.Errorf("fastpath: zeroing %d counter slots: %w", len(part), err)
		}
	}
	if _, err := dp.objs.PolicySlots.BatchUpdate(fresh, owners, nil); err != nil {
		return fmt.Errorf("fastpath: recording %d counter slots: %w", len(fresh), err)
	}
	return nil
}

// releaseCounterSlots is Apply's last step: the slots of policies that
// left the tables stop being reported and start resting.
func (dp *Datapath) releaseCounterSlots(t *Tables, now time.Time) error {
	gone := dp.slots.release(t, now)
	if len(gone) == 0 {
		return nil
	}
	if _, err := dp.objs.PolicySlots.BatchUpdate(gone, make([]uint32, len(gone)), nil); err != nil {
		return fmt.Errorf("fastpath: releasing %d counter slots: %w", len(gone), err)
	}
	return nil
}

// readSlotOwners reads policy_slots whole: owner policy index by slot.
func readSlotOwners(m *ebpf.Map) ([]uint32, error) {
	out := make([]uint32, 0, maxCounterSlots)
	const chunk = 65536
	keys, vals := make([]uint32, chunk), make([]uint32, chunk)
	var cursor ebpf.MapBatchCursor
	for len(out) < maxCounterSlots {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		out = append(out, vals[:n]...)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("fastpath: reading the counter slots' owners: %w", err)
		}
	}
	return out, nil
}

// readSlotCounts reads policy_counts for slots 0..n-1, summed over CPUs.
func readSlotCounts(m *ebpf.Map, n int) ([]fastpathFpCounter, error) {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	out := make([]fastpathFpCounter, 0, n)
	chunk := min(n, 4096)
	keys, vals := make([]uint32, chunk), make([]fastpathFpCounter, chunk*ncpu)
	var cursor ebpf.MapBatchCursor
	for len(out) < n {
		got, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < got && len(out) < n; i++ {
			var sum fastpathFpCounter
			for _, v := range vals[i*ncpu : (i+1)*ncpu] {
				sum.Packets += v.Packets
				sum.Bytes += v.Bytes
			}
			out = append(out, sum)
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("fastpath: reading per-policy counters: %w", err)
		}
	}
	return out, nil
}
