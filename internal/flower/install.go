// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"

	"sluice/internal/kernel"
	"sluice/internal/kernel/tcflower"
)

// Filter converts a rule to the kernel's filter. skipHW (labs only: the
// config refuses it without lab: true) installs it in software instead of
// hardware.
func (r *Rule) Filter(handle uint32, skipHW bool) *tcflower.Filter {
	f := &tcflower.Filter{Ifindex: r.Dev, Chain: r.Chain, Pref: r.Pref, Handle: handle,
		SkipSW: !skipHW, SkipHW: skipHW, IPv6: r.IPv6, VLANID: r.VLANID}
	switch r.Kind {
	case KindTTLGuard:
		f.TTL, f.TTLMask = 0, 0xfe
		f.Actions = []tcflower.Action{{Kind: tcflower.ActPass}}
		return f
	case KindICMPGuard:
		f.IPProto = icmpProto(r.IPv6)
		f.Actions = []tcflower.Action{{Kind: tcflower.ActPass}}
		return f
	case KindSrcGuard:
		f.Src = r.Src
		f.Actions = []tcflower.Action{{Kind: tcflower.ActPass}}
		return f
	}
	f.Src, f.Dst, f.IPProto, f.NoFrag, f.DstMAC = r.Src, r.Dst, r.Proto, true, r.MatchDstMAC
	f.SPort, f.SPortMask, f.DPort, f.DPortMask = r.SPort, r.SPortMask, r.DPort, r.DPortMask
	var a []tcflower.Action
	if r.MTU != 0 {
		a = append(a, tcflower.Action{Kind: tcflower.ActPoliceMTU, MTU: uint32(r.MTU)})
	}
	if r.UseTime {
		a = append(a, tcflower.Action{Kind: tcflower.ActPoliceUse})
	}
	if r.PopVLAN {
		a = append(a, tcflower.Action{Kind: tcflower.ActVLANPop})
	}
	if r.DecTTL {
		a = append(a, tcflower.Action{Kind: tcflower.ActDecTTL, Hoplimit: r.IPv6})
	}
	if r.DstMAC != nil {
		a = append(a, tcflower.Action{Kind: tcflower.ActSetMACs, DstMAC: r.DstMAC, SrcMAC: r.SrcMAC})
	}
	if r.DecTTL && !r.IPv6 {
		a = append(a, tcflower.Action{Kind: tcflower.ActCsumIP})
	}
	if r.PushVLAN != 0 {
		a = append(a, tcflower.Action{Kind: tcflower.ActVLANPush, VLANID: r.PushVLAN})
	}
	f.Actions = append(a, tcflower.Action{Kind: tcflower.ActRedirect, Ifindex: r.Redirect})
	return f
}

// ProbeResult says whether a device takes hardware-only flower rules.
type ProbeResult struct {
	OK bool `json:"ok"`
	// Busy: the driver refused with EBUSY, which mlx5 does when IPsec
	// packet offload is active on the netdev (it will not run tc offload
	// beside it without the patches the ConnectX-7 benchmark describes).
	Busy bool   `json:"busy,omitempty"`
	Msg  string `json:"message,omitempty"`
}

// probeHandle is the handle of the probe filter: outside the range
// Installer allocates.
const probeHandle = 0x7ffffffe

// Probe installs a harmless skip_sw filter on the device (a selector no
// packet has: source and destination 0.0.0.0/32, UDP port 9; the full
// action chain a forward uses, redirecting to the device itself) in the
// given chain, reads the kernel's answer and removes it. A refusal leaves
// that traffic to XDP: sluice never falls back to software flower, which
// would send cleartext out of the device without the NIC's encryption.
func Probe(fs *tcflower.Socket, ifindex int, chain uint32) ProbeResult {
	r := Rule{Kind: KindForward, Dev: ifindex, Chain: chain, Pref: prefFor(KindForward, 0, false),
		Src: netip.MustParsePrefix("0.0.0.0/32"), Dst: netip.MustParsePrefix("0.0.0.0/32"), Proto: 17, DPort: 9, DPortMask: 0xffff,
		DecTTL: true, MTU: 1500, Redirect: ifindex}
	f := r.Filter(probeHandle, false)
	errs, err := fs.Add([]*tcflower.Filter{f})
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		res := ProbeResult{Msg: err.Error()}
		var fe *tcflower.Error
		if errors.As(err, &fe) {
			res.Busy = fe.Errno == syscall.EBUSY
		}
		return res
	}
	_, _ = fs.Del([]*tcflower.Filter{f})
	return ProbeResult{OK: true}
}

// ExplainRefusal turns a probe's refusal into advice (doctor prints it).
func ExplainRefusal(dev string, p ProbeResult) string {
	switch {
	case p.OK:
		return ""
	case p.Busy:
		return fmt.Sprintf("%s refused a hardware flower rule with EBUSY: mlx5 does not run IPsec packet offload and tc flower offload on one netdev (%s). The flower tier stays off on %s and XDP serves its traffic. Fix: a kernel with the mlx5 patches that let them coexist (the ConnectX-7 benchmark), or switchdev mode on firmware that supports IPsec packet offload there (devlink port function set ... ipsec_packet enable); or set flower: off", dev, p.Msg, dev)
	case strings.Contains(p.Msg, "operation not supported"), strings.Contains(p.Msg, "not supported"):
		return fmt.Sprintf("%s does not offload these flower rules (%s): XDP serves its traffic. Check `ethtool -k %s hw-tc-offload` (turn it on) and the driver's support for pedit, csum, police mtu and mirred", dev, p.Msg, dev)
	}
	return fmt.Sprintf("%s refused a hardware flower rule (%s): XDP serves its traffic", dev, p.Msg)
}

// Installer keeps the devices' flower filters equal to the derived rules.
type Installer struct {
	FS     *tcflower.Socket
	SkipHW bool // labs only
	// Withdrawn, when set, says whether an XFRM event withdrew a policy's
	// forwarding rules while this apply runs (the tier's withdrawal).
	// Apply adds in chunks and asks between them: such a forward is not
	// sent, and one the kernel took already is removed after its chunk,
	// so a withdrawal waits for one chunk, not for a 65,536-rule apply.
	Withdrawn func(policy uint32) bool
	// installed: rule key -> handle and the rule it was built from.
	mu        sync.Mutex // serialises Apply, Reconcile and RulePackets
	installed map[string]installed
	next      uint32
}

type installed struct {
	handle uint32
	rule   Rule
}

// Stats counts what the last Apply did.
type Stats struct {
	Added, Removed, Refused int
}

// Apply installs what is new and removes what is gone. A filter whose
// contents changed (new next hop, new device) is removed before its
// replacement is added, so no stale forward outlives the change. Removals
// go first: a rule is gone before what it depended on changes further.
func (in *Installer) Apply(rules []Rule) (Stats, []error, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.installed == nil {
		in.installed = map[string]installed{}
	}
	want := make(map[string]Rule, len(rules))
	for _, r := range rules {
		want[r.Key()] = r
	}
	var st Stats
	var delKeys []string
	for k, old := range in.installed {
		if r, ok := want[k]; ok && r.String() == old.rule.String() {
			continue
		}
		delKeys = append(delKeys, k)
	}
	// Forwards come out before guards.
	sort.Slice(delKeys, func(a, b int) bool {
		fa, fb := in.installed[delKeys[a]].rule.Kind == KindForward, in.installed[delKeys[b]].rule.Kind == KindForward
		if fa != fb {
			return fa
		}
		return delKeys[a] < delKeys[b]
	})
	removed, out, err := in.removeKeys(delKeys)
	st.Removed = removed
	if err != nil {
		return st, nil, err
	}
	// Guards go in before the forwards they protect (a forward without
	// its TTL, ICMP or own-source guard would carry what the kernel must
	// see), and come out after them (above, removals are ordered the
	// other way).
	type pending struct {
		key   string
		rule  *Rule
		guard bool
	}
	news := make([]pending, 0, len(want))
	for k, r := range want {
		if _, ok := in.installed[k]; !ok {
			news = append(news, pending{k, &r, r.Kind != KindForward})
		}
	}
	slices.SortFunc(news, func(a, b pending) int {
		if a.guard != b.guard {
			if a.guard {
				return -1
			}
			return 1
		}
		return strings.Compare(a.key, b.key)
	})
	for lo := 0; lo < len(news); lo += applyChunk {
		chunk := news[lo:min(lo+applyChunk, len(news))]
		var sent []pending
		var add []*tcflower.Filter
		for _, p := range chunk {
			if in.withdrawn(p.rule) {
				continue
			}
			in.next++
			sent = append(sent, p)
			add = append(add, p.rule.Filter(in.next, in.SkipHW))
		}
		errs, err := in.FS.Add(add)
		if err != nil {
			return st, out, err
		}
		var late []string
		for i, p := range sent {
			if errs[i] != nil {
				st.Refused++
				out = append(out, errs[i])
				continue
			}
			in.installed[p.key] = installed{handle: add[i].Handle, rule: *p.rule}
			st.Added++
			if in.withdrawn(p.rule) {
				late = append(late, p.key)
			}
		}
		n, failed, err := in.removeKeys(late)
		st.Added -= n
		out = append(out, failed...)
		if err != nil {
			return st, out, err
		}
	}
	return st, out, nil
}

// applyChunk is how many filters Apply sends between two questions to
// Withdrawn: small enough that a withdrawn forward goes within a fraction
// of a second, large enough to keep the socket's window full.
const applyChunk = 512

func (in *Installer) withdrawn(r *Rule) bool {
	return in.Withdrawn != nil && r.Kind == KindForward && in.Withdrawn(r.PolicyIndex)
}

// removeKeys deletes installed filters by key (in.mu held); a filter the
// kernel no longer has counts as removed. failed holds the kernel's
// refusals, err a socket error.
func (in *Installer) removeKeys(keys []string) (removed int, failed []error, err error) {
	if len(keys) == 0 {
		return 0, nil, nil
	}
	del := make([]*tcflower.Filter, len(keys))
	for i, k := range keys {
		v := in.installed[k]
		del[i] = v.rule.Filter(v.handle, in.SkipHW)
	}
	errs, err := in.FS.Del(del)
	if err != nil {
		return 0, nil, err
	}
	for i, e := range errs {
		if e != nil && !errors.Is(e, syscall.ENOENT) {
			failed = append(failed, e)
			continue
		}
		delete(in.installed, keys[i])
		removed++
	}
	return removed, failed, nil
}

// Installed returns how many filters the installer believes are in place.
func (in *Installer) Installed() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.installed)
}

// Reconcile compares the devices' filters at sluice's priorities with what
// the installer believes it installed: filters it does not know are
// removed, and rules whose filter is missing are forgotten (the next Apply
// adds them again). Run it after a socket error, on ENOBUFS, and at start
// (a previous daemon's rules).
func (in *Installer) Reconcile(devs []int) (removed, missing int, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.installed == nil {
		in.installed = map[string]installed{}
	}
	type id struct {
		dev    int
		chain  uint32
		pref   uint16
		handle uint32
	}
	known := map[id]string{}
	for k, v := range in.installed {
		known[id{v.rule.Dev, v.rule.Chain, v.rule.Pref, v.handle}] = k
	}
	seen := map[string]bool{}
	var stale []*tcflower.Filter
	for _, dev := range devs {
		hs, err := tcflower.Dump(dev)
		if err != nil {
			return 0, 0, err
		}
		for _, h := range hs {
			if h.Pref < PrefGuard || h.Pref > prefMax {
				continue
			}
			if k, ok := known[id{dev, h.Chain, h.Pref, h.Handle}]; ok {
				seen[k] = true
				continue
			}
			// Delete by identity; the protocol must match the filter's,
			// and 0 (all) matches any.
			stale = append(stale, &tcflower.Filter{Ifindex: dev, Chain: h.Chain, Pref: h.Pref, Handle: h.Handle, VLANID: 0})
		}
	}
	for k := range in.installed {
		if !seen[k] {
			delete(in.installed, k)
			missing++
		}
	}
	errs, err := in.FS.DelAny(stale)
	if err != nil {
		return 0, missing, err
	}
	var failed []error
	for _, e := range errs {
		if e == nil || errors.Is(e, syscall.ENOENT) {
			removed++
		} else {
			failed = append(failed, e)
		}
	}
	return removed, missing, errors.Join(failed...)
}

// RemoveAll removes sluice's flower filters (its priority range, any
// chain) from every device's clsact ingress in the calling thread's
// namespace: what `sluice gateway stop` runs, so that rules a killed
// daemon left do not outlive it. It returns how many it removed.
func RemoveAll(fs *tcflower.Socket) (int, error) {
	devs, err := kernel.LinkIndexes()
	if err != nil {
		return 0, err
	}
	in := &Installer{FS: fs}
	removed, _, err := in.Reconcile(devs)
	return removed, err
}

// RulePackets returns, per policy, the packets its installed forwarding
// rules counted (summed over ports), from a dump of the devices.
func (in *Installer) RulePackets() (map[uint32]uint64, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	type id struct {
		dev    int
		chain  uint32
		pref   uint16
		handle uint32
	}
	byID := map[id]uint32{}
	devs := map[int]bool{}
	for _, v := range in.installed {
		if v.rule.Kind == KindForward {
			byID[id{v.rule.Dev, v.rule.Chain, v.rule.Pref, v.handle}] = v.rule.PolicyIndex
			devs[v.rule.Dev] = true
		}
	}
	out := map[uint32]uint64{}
	for dev := range devs {
		hs, err := tcflower.Dump(dev)
		if err != nil {
			return nil, err
		}
		for _, h := range hs {
			if idx, ok := byID[id{dev, h.Chain, h.Pref, h.Handle}]; ok {
				out[idx] += h.Packets
			}
		}
	}
	return out, nil
}
