// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/cilium/ebpf"

	"sluice/internal/fileread"
)

// L2Mode says who writes the Ethernet header of forwarded frames.
type L2Mode uint8

const (
	// L2NIC leaves the header to the NIC (mlx5 tunnel-mode packet offload
	// rewrites it from the SA's neighbour).
	L2NIC L2Mode = 0
	// L2FIB writes MACs from bpf_fib_lookup.
	L2FIB L2Mode = 1
)

// String is the mode as gateway.yaml's l2 key spells it.
func (m L2Mode) String() string {
	if m == L2FIB {
		return "fib"
	}
	return "nic"
}

// Iface is one interface as the program sees it.
type Iface struct {
	Ifindex int
	L2      L2Mode
	// InboundForward lets the program forward traffic that matches IN/FWD
	// policies. The config allows it only with wan-antispoof: upstream.
	InboundForward bool
	// VLAN child: its tag and parent. The program sees tagged frames on
	// the parent and sends tagged frames to it.
	VLANID        uint16
	ParentIfindex int
	// Hairpin next hop for inbound forwarding (0: use the FIB).
	HairpinIfindex int
	HairpinDstMAC  net.HardwareAddr
	HairpinSrcMAC  net.HardwareAddr
}

// deviceFacts reads what the program checks of the device itself, in the
// caller's network namespace: its MAC (the kernel forwards only frames
// sent to it) and its IPv4 reverse-path filter mode (the larger of
// net.ipv4.conf.all and the device's rp_filter, as the kernel takes it:
// 0 off, 1 strict, 2 loose). A device that is not there gets no MAC check
// and the "all" setting: the program never sees its packets anyway.
func deviceFacts(ifindex int) (mac net.HardwareAddr, rpFilter uint8) {
	rp := func(dev string) uint8 {
		b, err := fileread.ReadKernel("/proc/sys/net/ipv4/conf/"+dev+"/rp_filter", 16)
		switch v := strings.TrimSpace(string(b)); {
		case err != nil:
			return 1 // unreadable: strict, so the kernel decides
		case v == "0" || v == "2":
			return v[0] - '0'
		default:
			return 1
		}
	}
	rpFilter = rp("all")
	ifc, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return nil, rpFilter
	}
	return ifc.HardwareAddr, max(rpFilter, rp(ifc.Name))
}

// SetIfaces replaces the interface, VLAN and redirect tables (the redirect
// ports: ports.go). Devmap values are ifindexes resolved in the caller's
// network namespace: call it from the namespace that owns the devices.
func (dp *Datapath) SetIfaces(ifs []Iface) error {
	dp.ifMu.Lock()
	defer dp.ifMu.Unlock()
	want := map[uint32]fastpathFpIface{}
	vlans := map[fastpathFpVlanKey]uint32{}
	ports := map[uint32]bool{}
	if len(ifs) >= maxIfaceSlots {
		return fmt.Errorf("fastpath: %d interfaces; at most %d have their own counters", len(ifs), maxIfaceSlots-1)
	}
	for n, i := range ifs {
		v := fastpathFpIface{
			Slot: uint32(n + 1), L2Mode: uint8(i.L2), VlanId: i.VLANID, ParentIfindex: uint32(i.ParentIfindex),
			HairpinIfindex: uint32(i.HairpinIfindex),
		}
		if i.InboundForward {
			v.InboundForward = 1
		}
		copy(v.HairpinDmac[:], i.HairpinDstMAC)
		copy(v.HairpinSmac[:], i.HairpinSrcMAC)
		mac, rpFilter := deviceFacts(i.Ifindex)
		copy(v.Mac[:], mac)
		v.RpFilter = rpFilter
		want[uint32(i.Ifindex)] = v
		if i.ParentIfindex != 0 {
			vlans[fastpathFpVlanKey{Ifindex: uint32(i.ParentIfindex), Vid: uint32(i.VLANID)}] = uint32(i.Ifindex)
			ports[uint32(i.ParentIfindex)] = true
		} else {
			ports[uint32(i.Ifindex)] = true
		}
		if i.HairpinIfindex != 0 {
			ports[uint32(i.HairpinIfindex)] = true
		}
	}
	// The ports first: every entry below holds its device's number.
	portOf, err := dp.setPorts(ports)
	if err != nil {
		return err
	}
	inbound := false
	for k, v := range want {
		inbound = inbound || v.InboundForward != 0
		if v.ParentIfindex != 0 {
			v.Port = portOf[v.ParentIfindex]
		} else {
			v.Port = portOf[k]
		}
		want[k] = v
	}
	if inbound { // fwd_dsts first: it must cover what the interfaces allow
		if err := dp.setDstFlags(func(in, _ *bool) { *in = true }); err != nil {
			return err
		}
	}
	for k, v := range want {
		if err := dp.objs.Ifaces.Put(k, v); err != nil {
			return fmt.Errorf("fastpath: interface %d: %w", k, err)
		}
	}
	for k, v := range vlans {
		if err := dp.objs.Vlans.Put(k, v); err != nil {
			return fmt.Errorf("fastpath: vlan %d on %d: %w", k.Vid, k.Ifindex, err)
		}
	}
	if err := prune(dp.objs.Ifaces, func(k uint32) bool { _, ok := want[k]; return ok }); err != nil {
		return err
	}
	var vk fastpathFpVlanKey
	var stale []fastpathFpVlanKey
	it := dp.objs.Vlans.Iterate()
	var vv uint32
	for it.Next(&vk, &vv) {
		if _, ok := vlans[vk]; !ok {
			stale = append(stale, vk)
		}
	}
	for _, k := range stale {
		_ = dp.objs.Vlans.Delete(k)
	}
	if err := it.Err(); err != nil {
		return err
	}
	if err := dp.setIfaceSlots(want); err != nil {
		return err
	}
	if err := dp.setOwnAddrs(); err != nil {
		return err
	}
	if !inbound {
		if err := dp.setDstFlags(func(in, _ *bool) { *in = false }); err != nil {
			return err
		}
	}
	// Interfaces (and, through the caller, routes and neighbours) changed:
	// flow-cache entries derived from the old state must not be replayed.
	// Last, so that no entry is filled from a state still being pruned.
	return dp.BumpRouteEpoch()
}

// ifaceSlotMap mirrors FP_IFACE_SLOT_MAP: places in each half of iface_slots.
const ifaceSlotMap = 256

// setIfaceSlots writes iface_slots, the direct-mapped copy of the interface
// table the program reads before ifaces (the lowest ifindex takes a
// contested place; the others are found in ifaces): the half the program
// does not read, whole, then flips config.iface_gen to it.
func (dp *Datapath) setIfaceSlots(ifs map[uint32]fastpathFpIface) error {
	var refs [ifaceSlotMap]fastpathFpIfaceRef
	for k, v := range ifs {
		at := k & (ifaceSlotMap - 1)
		if refs[at].Ifindex == 0 || k < refs[at].Ifindex {
			refs[at] = fastpathFpIfaceRef{Ifindex: k, I: v}
		}
	}
	cfg, err := dp.config()
	if err != nil {
		return err
	}
	next := cfg.IfaceGen ^ 1
	keys := make([]uint32, ifaceSlotMap)
	for i := range keys {
		keys[i] = (next&1)*ifaceSlotMap + uint32(i)
	}
	if _, err := dp.objs.IfaceSlots.BatchUpdate(keys, refs[:], nil); err != nil {
		return fmt.Errorf("fastpath: writing the direct-mapped interface table: %w", err)
	}
	return dp.updateConfig(func(cfg *fastpathFpConfig) bool {
		cfg.IfaceGen = next
		return true
	})
}

func prune(m *ebpf.Map, keep func(uint32) bool) error {
	var k uint32
	var stale []uint32
	it := m.Iterate()
	val := make([]byte, m.ValueSize())
	for it.Next(&k, &val) {
		if !keep(k) {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// setOwnAddrs writes the namespace's IPv4 addresses (the caller's: every
// device, as the kernel's own-source check looks at all of them) into
// own_addrs, dropping those that went away, and their /24s into own_nets:
// a /24's bit is set before its addresses are added and cleared after the
// last one is gone, so the bits always cover the table (a clear bit skips
// the table).
func (dp *Datapath) setOwnAddrs() error {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return fmt.Errorf("fastpath: listing this host's addresses: %w", err)
	}
	want := map[uint32]bool{}
	words := map[uint32]uint64{} // own_nets words of the new set
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.To4() == nil {
			continue
		}
		v4 := ipn.IP.To4()
		want[binary.NativeEndian.Uint32(v4)] = true // network byte order in memory, as the program reads it
		top := binary.BigEndian.Uint32(v4) >> 8
		words[top>>6] |= 1 << (top & 63)
	}
	for i, bits := range words { // first the union of old and new
		var old uint64
		if err := dp.objs.OwnNets.Lookup(i, &old); err != nil {
			return fmt.Errorf("fastpath: reading own_nets: %w", err)
		}
		if err := dp.objs.OwnNets.Put(i, old|bits); err != nil {
			return fmt.Errorf("fastpath: writing own_nets: %w", err)
		}
	}
	for k := range want {
		if err := dp.objs.OwnAddrs.Put(k, uint8(1)); err != nil {
			return fmt.Errorf("fastpath: own address %s: %w", net.IP(binary.NativeEndian.AppendUint32(nil, k)), err)
		}
	}
	if err := prune(dp.objs.OwnAddrs, func(k uint32) bool { return want[k] }); err != nil {
		return err
	}
	for i := range dp.ownWords { // then the new set alone
		if _, ok := words[i]; !ok {
			words[i] = 0
		}
	}
	for i, bits := range words {
		if err := dp.objs.OwnNets.Put(i, bits); err != nil {
			return fmt.Errorf("fastpath: writing own_nets: %w", err)
		}
		if bits == 0 {
			delete(words, i)
		}
	}
	dp.ownWords = words
	return nil
}
