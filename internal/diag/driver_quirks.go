// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"sluice/internal/driverquirk"
	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// checkDriverQuirks reads the installed packet-offloaded policies and SAs
// against internal/driverquirk's table for the driver that holds them
// (the NIC model's from its profile) and the running kernel:
//
//   - an offloaded OUT policy with a subnet selector on a driver that
//     matches selectors exactly: Fail (the rest of the subnet leaves in
//     cleartext now);
//   - packet offload on a bond's port on a kernel that accepts cleartext
//     matching a packet-offloaded IN policy: Warn (a failover at either
//     end leaks silently; bond-port-offload has the failover itself);
//   - an inbound non-ESN packet-offloaded SA on a driver without
//     anti-replay for it: Warn.
//
// Moving non-ESN SAs is a plan's act, not a state: plan refuses it.
func checkDriverQuirks(f *Facts, _ *DoctorOptions) []Result {
	release := ""
	if f.Kernel != nil {
		release = f.Kernel.Release
	}
	var rs []Result
	packet := false
	for _, p := range f.Policies {
		if p.Offload == nil || !p.Offload.Packet() || p.Dir != xfrm.DirOut {
			continue
		}
		packet = true
		dev, q := f.quirksOf(p.Offload.Ifindex, release)
		e, ok := q.Get(driverquirk.ExactSelectorMatch)
		if !ok || (isHostPrefix(p.Sel.Src) && isHostPrefix(p.Sel.Dst)) {
			continue
		}
		rs = append(rs, Result{Verdict: Fail, Subject: dev,
			Summary: fmt.Sprintf("OUT policy %s -> %s is packet-offloaded to %s (%s), which matches selector addresses exactly: only %s -> %s is encrypted in hardware, the rest of the subnet leaves in cleartext",
				p.Sel.Src, p.Sel.Dst, dev, q.As, p.Sel.Src.Addr(), p.Sel.Dst.Addr()),
			Evidence: []string{"source: " + e.Source, "kernel range: " + e.Range()}, Fix: e.Fix})
	}
	bondWarned := map[string]bool{}
	for _, s := range f.States {
		if s.Offload == nil || !s.Offload.Packet() {
			continue
		}
		packet = true
		dev, q := f.quirksOf(s.Offload.Ifindex, release)
		if e, ok := q.Get(driverquirk.NoReplayWithoutESN); ok && s.Offload.Inbound() && !s.Alg.ESN {
			rs = append(rs, Result{Verdict: Warn, Subject: dev,
				Summary:  fmt.Sprintf("inbound SA spi %#x from %s is packet-offloaded to %s (%s) without ESN: no anti-replay at all (the driver keeps a window only for ESN SAs, and the kernel does not check packet-offloaded SAs)", s.SPI, s.Src, dev, q.As),
				Evidence: []string{"source: " + e.Source}, Fix: e.Fix})
		}
		n := f.netdevByIndex(s.Offload.Ifindex)
		if n == nil || bondWarned[n.Name] {
			continue
		}
		bond := f.netdev(n.Master)
		if n.Kind == "bond" {
			bond = n
		}
		if bond == nil || bond.Kind != "bond" {
			continue
		}
		if e, ok := q.Get(driverquirk.CleartextAcceptedOnOffloadedIN); ok {
			bondWarned[n.Name] = true
			rs = append(rs, Result{Verdict: Warn, Subject: n.Name,
				Summary: fmt.Sprintf("packet-offloaded SAs on %s (bond %s), and Linux %s accepts cleartext matching a packet-offloaded IN policy: after a failover at either end the cleartext is taken without a drop or a counter",
					n.Name, bond.Name, release),
				Evidence: []string{"source: " + e.Source}, Fix: e.Fix})
		}
	}
	if len(rs) > 0 {
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].Verdict > rs[j].Verdict })
		return rs
	}
	if !packet {
		return []Result{{Verdict: Skip, Summary: "no packet-offloaded SA or policy"}}
	}
	return []Result{{Verdict: OK, Summary: "no packet-offloaded SA or policy that the driver table flags on this kernel"}}
}

// quirksOf returns the device with ifindex idx and the table's rows for
// it and every device beneath it (a bond's ports: the SAs can be on any
// at a failover; a VLAN's or macvlan's port, whose driver decides what
// leaves: kernel.StackedOnLink), the union where drivers differ.
func (f *Facts) quirksOf(idx int, release string) (string, driverquirk.Set) {
	n := f.netdevByIndex(idx)
	if n == nil {
		return fmt.Sprintf("ifindex %d", idx), driverquirk.For(driverquirk.AnyDriver, release)
	}
	core := driverquirk.For(driverquirk.AnyDriver, release)
	q := core
	var as []string // n's reading, and the readings with driver rows beneath
	for _, d := range f.stackOf(n) {
		dq := f.quirksOfDriver(d.Driver, release)
		q = q.Merge(dq)
		if d == n || len(dq.Entries()) > len(core.Entries()) {
			as = append(as, dq.As)
		}
	}
	q.Driver, q.As = n.Driver, strings.Join(slices.Compact(as), "; ")
	return n.Name, q
}

// stackOf returns n and the devices beneath it, as kernel.StackDevices
// walks them, from the facts already read.
func (f *Facts) stackOf(n *kernel.NetdevFacts) []*kernel.NetdevFacts {
	var out []*kernel.NetdevFacts
	seen := map[string]bool{}
	var walk func(d *kernel.NetdevFacts, depth int)
	walk = func(d *kernel.NetdevFacts, depth int) {
		if d == nil || seen[d.Name] || depth > 8 {
			return
		}
		seen[d.Name] = true
		out = append(out, d)
		switch {
		case kernel.StackedOnLink(d.Kind):
			walk(f.netdev(d.Lower), depth+1)
		case kernel.StackedOnPorts(d.Kind):
			for _, p := range d.Slaves {
				walk(f.netdev(p), depth+1)
			}
		}
	}
	walk(n, 0)
	return out
}

func (f *Facts) quirksOfDriver(driver, release string) driverquirk.Set {
	if driver == driverquirk.ModelDriver {
		if f.ModelProfile == "" {
			s := driverquirk.For(driverquirk.AnyDriver, release)
			s.As = "nicmodel without profiles (software XFRM)"
			return s
		}
		return driverquirk.ForModel(f.ModelProfile, release)
	}
	return driverquirk.For(driver, release)
}

func (f *Facts) netdevByIndex(idx int) *kernel.NetdevFacts {
	for i := range f.Netdevs {
		if f.Netdevs[i].Index == idx {
			return &f.Netdevs[i]
		}
	}
	return nil
}

// isHostPrefix: a selector of one address (0.0.0.0/0 is no host: a
// zero address is no match criterion in mlx5, and not a subnet leak).
func isHostPrefix(p netip.Prefix) bool {
	return p.Bits() == p.Addr().BitLen() || p.Bits() == 0
}
