// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf"
)

// Apply writes compiled tables into the idle generation and then flips the
// active generation with one word write, so the program sees either the
// old tables or the new ones, never a mix. It also marks the fast path
// ready.
func (dp *Datapath) Apply(t *Tables) error {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	cfg, err := dp.config()
	if err != nil {
		return err
	}
	// config.gen counts Applies; its low bit names the table set. A
	// counter rather than 0/1: a flow-cache entry carries the gen it was
	// made under, and an entry from two Applies back must not be fresh
	// again (one from the tables before last, replayed under these).
	idle := (cfg.Gen + 1) & 1
	now := time.Now()
	if err := dp.assignCounterSlots(t, now); err != nil {
		return err
	}
	// fwd_dsts covers both policy sets until the flip, the new one after.
	sets := forwardableDsts(t)
	want := sets.want(dp.inboundAny, dp.countersOn)
	if err := dp.loadDsts(); err != nil {
		return err
	}
	if err := dp.writeDsts(orWords(dp.dsts, want)); err != nil {
		return err
	}

	// IPv4 entries go to their own table with a 16-byte key (fp_pkey4).
	keys := make([]fastpathFpPkey, 0, len(t.Entries))
	vals := make([]fastpathFpPentry, 0, len(t.Entries))
	keys4 := make([]fastpathFpPkey4, 0, len(t.Entries))
	vals4 := make([]fastpathFpPentry, 0, len(t.Entries))
	for k, v := range t.Entries {
		if k.Family == 0 {
			keys4 = append(keys4, pkey4(k))
			vals4 = append(vals4, v)
			continue
		}
		keys = append(keys, k)
		vals = append(vals, v)
	}
	inner, err := dp.newPolicyTable(dp.innerSpec, len(keys))
	if err != nil {
		return err
	}
	defer inner.Close() // the outer map holds its own reference
	inner4, err := dp.newPolicyTable(dp.innerSpec4, len(keys4))
	if err != nil {
		return err
	}
	defer inner4.Close()
	if len(keys) > 0 {
		if _, err := inner.BatchUpdate(keys, vals, nil); err != nil {
			return fmt.Errorf("fastpath: writing %d IPv6 policies: %w", len(keys), err)
		}
	}
	if len(keys4) > 0 {
		if _, err := inner4.BatchUpdate(keys4, vals4, nil); err != nil {
			return fmt.Errorf("fastpath: writing %d IPv4 policies: %w", len(keys4), err)
		}
	}
	if err := dp.writeSARefs(t); err != nil {
		return err
	}
	if err := dp.writeDidx(idle, t); err != nil {
		return err
	}
	for fam := 0; fam < 2; fam++ {
		for i, tu := range t.Tuples[fam] {
			idx := uint32((int(idle)*2+fam)*MaxTuples + i)
			if err := dp.objs.Tuples.Put(idx, tu); err != nil {
				return fmt.Errorf("fastpath: writing tuple %d: %w", i, err)
			}
		}
	}
	if err := dp.objs.PolicyTables.Put(idle, inner); err != nil {
		return fmt.Errorf("fastpath: installing the policy table: %w", err)
	}
	if err := dp.objs.PolicyTables4.Put(idle, inner4); err != nil {
		return fmt.Errorf("fastpath: installing the IPv4 policy table: %w", err)
	}
	// First publish the idle generation's sizes (the active ones are
	// rewritten unchanged), then flip.
	cfg.Ntuples[idle][0] = uint32(len(t.Tuples[0]))
	cfg.Ntuples[idle][1] = uint32(len(t.Tuples[1]))
	cfg.FwdDefaultBlock = b2u(t.FwdDefaultBlock)
	if err := dp.objs.Config.Put(uint32(0), cfg); err != nil {
		return err
	}
	// The flip retires every flow-cache entry (they carry the
	// generation), so the key's shape can change with it.
	dp.policyL4 = t.selectsL4()
	cfg.FlowL4 = b2u(dp.policyL4 || dp.fibL4)
	cfg.Gen++
	cfg.Ready = 1
	if err := dp.objs.Config.Put(uint32(0), cfg); err != nil {
		return err
	}
	dp.dstSets = sets
	if err := dp.writeDsts(want); err != nil {
		return err
	}
	return dp.releaseCounterSlots(t, now)
}

// selectsL4 reports whether any selector shape names a protocol or ports:
// then two packets between the same hosts may be decided differently.
func (t *Tables) selectsL4() bool {
	for _, fam := range t.Tuples {
		for _, tu := range fam {
			if tu.ProtoSet != 0 || tu.SportMask != 0 || tu.DportMask != 0 {
				return true
			}
		}
	}
	return false
}

// SetFIBUsesL4 says whether the kernel's FIB may route or hash on protocol
// and ports (policy rules on them, an L4 multipath hash): then the flow
// cache keys on them too. A change expires every cached entry.
func (dp *Datapath) SetFIBUsesL4(l4 bool) (changed bool, err error) {
	err = dp.updateConfig(func(cfg *fastpathFpConfig) bool {
		if dp.fibL4 == l4 && cfg.FlowL4 == b2u(dp.policyL4 || l4) {
			return false
		}
		changed = dp.fibL4 != l4
		dp.fibL4 = l4
		cfg.FlowL4 = b2u(dp.policyL4 || dp.fibL4)
		cfg.RouteEpoch++
		return true
	})
	return changed, err
}

// SetFIBDstOnly says whether the kernel's IPv4 FIB answers from the
// ingress, destination and TOS alone (kernel.FIBByDestination): only then
// may the program reuse a FIB answer for another packet to the same
// destination (fib_cache). A change bumps the route epoch, so no answer
// from before it is reused after it.
func (dp *Datapath) SetFIBDstOnly(on bool) (changed bool, err error) {
	err = dp.updateConfig(func(cfg *fastpathFpConfig) bool {
		if cfg.FibDstOnly == b2u(on) {
			return false
		}
		changed = true
		cfg.FibDstOnly = b2u(on)
		cfg.RouteEpoch++
		return true
	})
	return changed, err
}

// FlowCacheKeysL4 reports whether flow-cache keys carry protocol and ports.
func (dp *Datapath) FlowCacheKeysL4() (bool, error) {
	cfg, err := dp.config()
	return cfg.FlowL4 != 0, err
}

// updateConfig applies change to the config under the lock and writes it
// back when change says it changed something.
func (dp *Datapath) updateConfig(change func(*fastpathFpConfig) bool) error {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	cfg, err := dp.config()
	if err != nil {
		return err
	}
	if !change(&cfg) {
		return nil
	}
	return dp.objs.Config.Put(uint32(0), cfg)
}

// SetReady opens (true) or closes (false) the fast path. Closed, every
// packet goes to the kernel: the state while the mirror resynchronises.
func (dp *Datapath) SetReady(ready bool) error {
	return dp.updateConfig(func(cfg *fastpathFpConfig) bool {
		cfg.Ready = b2u(ready)
		return true
	})
}

// SetCounters turns per-policy counters on or off.
func (dp *Datapath) SetCounters(on bool) error {
	if err := dp.setDstFlags(func(_, counters *bool) { *counters = on }); err != nil {
		return err
	}
	return dp.updateConfig(func(cfg *fastpathFpConfig) bool {
		cfg.Counters = b2u(on)
		return true
	})
}

// SetUseTime turns on handing the kernel one forwardable packet per policy
// per route epoch, so the kernel's policy use times (which strongSwan
// reads) stay true under fast-path-only traffic. See docs/fastpath.md.
func (dp *Datapath) SetUseTime(on bool) error {
	return dp.updateConfig(func(cfg *fastpathFpConfig) bool {
		cfg.UseTime = b2u(on)
		return true
	})
}

func (dp *Datapath) config() (fastpathFpConfig, error) {
	var cfg fastpathFpConfig
	if err := dp.objs.Config.Lookup(uint32(0), &cfg); err != nil {
		return cfg, fmt.Errorf("fastpath: reading config: %w", err)
	}
	return cfg, nil
}

func (dp *Datapath) newPolicyTable(shape *ebpf.MapSpec, n int) (*ebpf.Map, error) {
	spec := shape.Copy()
	// Headroom keeps hash chains short; the kernel needs at least 1.
	spec.MaxEntries = uint32(max(n+n/4, 16))
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, fmt.Errorf("fastpath: creating a policy table for %d entries: %w", n, err)
	}
	return m, nil
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// RenewLease keeps the fast path open for d more; d <= 0 closes it now.
// Past the lease, without a renewal, the program passes everything to the
// kernel: the daemon may have died and missed an SA going away. The
// deadline is a BPF timer armed by xdp_lease_renew (struct fp_lease), so
// it runs out even when this process is gone.
func (dp *Datapath) RenewLease(d time.Duration) error {
	err := dp.updateConfig(func(cfg *fastpathFpConfig) bool {
		changed := cfg.LeaseNs != d.Nanoseconds()
		cfg.LeaseNs = d.Nanoseconds()
		return changed
	})
	if err != nil {
		return err
	}
	// Only the mirror renews, so nothing changes lease_ns between the
	// write above and the run below. XDP's BPF_PROG_RUN wants at least an
	// Ethernet header of input.
	ret, err := dp.objs.XdpLeaseRenew.Run(&ebpf.RunOptions{Data: make([]byte, 64)})
	if err != nil {
		return fmt.Errorf("fastpath: renewing the lease: %w", err)
	}
	if ret != XDPPass {
		return fmt.Errorf("fastpath: renewing the lease: the kernel refused the timer (program returned %d)", ret)
	}
	return nil
}

// BumpRouteEpoch invalidates every flow-cache entry: call it when routes,
// neighbours or interfaces change, since cached forwards carry a FIB
// result.
func (dp *Datapath) BumpRouteEpoch() error {
	return dp.updateConfig(func(cfg *fastpathFpConfig) bool {
		cfg.RouteEpoch++
		return true
	})
}

// pkey4 is an IPv4 policy key in the IPv4 tables' layout.
func pkey4(k fastpathFpPkey) fastpathFpPkey4 {
	return fastpathFpPkey4{Tuple: k.Tuple, Proto: k.Proto, Sport: k.Sport, Dport: k.Dport, Src: k.Src[0], Dst: k.Dst[0]}
}

// pkeyOf4 is the inverse of pkey4.
func pkeyOf4(k fastpathFpPkey4) fastpathFpPkey {
	return fastpathFpPkey{Family: 0, Tuple: k.Tuple, Proto: k.Proto, Sport: k.Sport, Dport: k.Dport,
		Src: [4]uint32{k.Src}, Dst: [4]uint32{k.Dst}}
}
