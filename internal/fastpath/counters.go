// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"fmt"
	"math"
)

// maxIfaceSlots mirrors FP_MAX_IFACE_SLOTS: slot 0 counts packets from
// interfaces the gateway does not know.
const maxIfaceSlots = 64

// ReasonCounts returns, per ingress ifindex (0: unknown interfaces), how
// many packets ended with each reason, summed over CPUs.
func (dp *Datapath) ReasonCounts() (map[int]map[Reason]uint64, error) {
	slotIf := map[uint32]int{0: 0}
	var k uint32
	var v fastpathFpIface
	it := dp.objs.Ifaces.Iterate()
	for it.Next(&k, &v) {
		slotIf[v.Slot] = int(k)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("fastpath: reading interfaces: %w", err)
	}
	out := map[int]map[Reason]uint64{}
	var perCPU []uint64
	for slot, ifindex := range slotIf {
		for r := Reason(0); r < reasonMax; r++ {
			key := slot*uint32(reasonMax) + uint32(r)
			if err := dp.objs.ReasonCounts.Lookup(key, &perCPU); err != nil {
				return nil, fmt.Errorf("fastpath: reading reason counters: %w", err)
			}
			var sum uint64
			for _, n := range perCPU {
				sum += n
			}
			if sum == 0 {
				continue
			}
			if out[ifindex] == nil {
				out[ifindex] = map[Reason]uint64{}
			}
			out[ifindex][r] = sum
		}
	}
	return out, nil
}

// PolicyCounter is what the fast path counted for one policy: packets it
// decided (forwarded or passed), by kernel policy index.
type PolicyCounter struct {
	Index   uint32 `json:"index"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// PolicyCounts returns the per-policy counters, summed over CPUs, of the
// policies that counted something: by counter slot (policy_counts), named
// by the slots' owners (policy_slots; see counterslots.go).
func (dp *Datapath) PolicyCounts() ([]PolicyCounter, error) {
	owners, err := readSlotOwners(dp.objs.PolicySlots)
	if err != nil {
		return nil, err
	}
	n := 0
	for slot, index := range owners {
		if index != 0 {
			n = slot + 1
		}
	}
	if n == 0 {
		return nil, nil
	}
	counts, err := readSlotCounts(dp.objs.PolicyCounts, n)
	if err != nil {
		return nil, err
	}
	var out []PolicyCounter
	for slot, c := range counts {
		if owners[slot] != 0 && c.Packets != 0 {
			out = append(out, PolicyCounter{Index: owners[slot], Packets: c.Packets, Bytes: c.Bytes})
		}
	}
	return out, nil
}

// CacheStats returns the flow cache's counters over all CPUs: forwards
// replayed (hits), forward entries written (fills), packets that went
// around it while it was off for thrashing (bypassed), and passes replayed
// and written (pass hits, pass fills).
func (dp *Datapath) CacheStats() (CacheCounters, error) {
	var c CacheCounters
	var perCPU []fastpathFpCacheGate
	if err := dp.objs.CacheGate.Lookup(uint32(0), &perCPU); err != nil {
		return c, err
	}
	for _, g := range perCPU {
		c.Hits += g.TotalHits
		c.Fills += g.TotalFills
		c.Bypassed += g.TotalBypassed
		c.PassHits += g.TotalPassHits
		c.PassFills += g.TotalPassFills
	}
	return c, nil
}

// CacheCounters are the flow cache's counters, summed over CPUs.
type CacheCounters struct {
	Hits  uint64 `json:"hits"`
	Fills uint64 `json:"fills"`
	// Bypassed counts packets decided without the cache because it was
	// thrashing on their CPU (more live flows than it holds).
	Bypassed uint64 `json:"bypassed"`
	// PassHits and PassFills count the cached `inbound` passes: packets an
	// IN or FWD policy decides on an interface that does not forward
	// inbound, passed from the cache (and counted against that policy)
	// instead of by the full decision.
	PassHits  uint64 `json:"pass_hits"`
	PassFills uint64 `json:"pass_fills"`
}

// SetFlowCacheOff turns the flow cache off (true) or back on (false) on
// every CPU, as the thrash gate does for a while: with it off, every
// packet takes the full decision and nothing is cached, which is what the
// first packet of every flow costs. For measurements (`sluice bench
// fastpath`'s first-packet case); it rewrites the gate's counters of the
// current window, so do not call it under traffic one cares to count.
func (dp *Datapath) SetFlowCacheOff(off bool) error {
	var perCPU []fastpathFpCacheGate
	if err := dp.objs.CacheGate.Lookup(uint32(0), &perCPU); err != nil {
		return fmt.Errorf("fastpath: reading the cache gate: %w", err)
	}
	for i := range perCPU {
		perCPU[i].OffUntilNs = 0
		if off {
			perCPU[i].OffUntilNs = math.MaxUint64 // never reached: off until turned on
		}
		perCPU[i].Hits, perCPU[i].Fills = 0, 0
	}
	if err := dp.objs.CacheGate.Put(uint32(0), perCPU); err != nil {
		return fmt.Errorf("fastpath: writing the cache gate: %w", err)
	}
	return nil
}
