// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"sluice/internal/fastpath"
	"sluice/internal/kernel/xfrm"
)

// The peer is fastSwan's XDP program (github.com/acassen/fastswan,
// src/bpf/xfrm_offload.c), which `bench fastpath --peer OBJ` measures
// beside sluice's in the same run, over the same policy sets and frames.
// Its code is AGPL-3.0 and is neither copied nor built here: the user
// builds the object from its source and names it. What follows is only the
// layout of its maps, as its xfrm.h declares them and its control plane
// (src/fswan_bpf_xfrm.c) fills them:
//
//	dst_lpm     LPM trie {u32 prefixlen; be32 dst} -> u32 dst_id
//	policy_lpm  LPM trie {u32 prefixlen = 32 + source bits; u32 dst_id; be32 src}
//	            -> {u32 ifindex; u32 stats_slot; u8 flags; pad to 16}
//	redirect_map  devmap hash ifindex -> ifindex
//
// It mirrors IN and OUT policies (never FWD) whose SA is packet-offloaded,
// IPv4 only, without priorities: the longest destination, then the
// longest source under it.
const (
	peerProg         = "xfrm_offload"
	peerFlagIngress  = 1 << 0
	peerFlagEgress   = 1 << 1
	peerPolicyValLen = 16
)

// peer is the loaded peer program with its policy set.
type peer struct {
	coll *ebpf.Collection
	prog *ebpf.Program
}

// loadPeer loads the object at path and fills its maps from snap as
// fastSwan's control plane would: one dst_id per distinct destination
// prefix, one policy_lpm entry per IN or OUT packet-offloaded IPv4 policy,
// every device a redirect target. Call it in the namespace of the devices.
func loadPeer(path string, snap fastpath.Snapshot, ports []int) (*peer, error) {
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		return nil, fmt.Errorf("--peer %s: %w", path, err)
	}
	for _, name := range []string{"dst_lpm", "policy_lpm", "redirect_map"} {
		if spec.Maps[name] == nil {
			return nil, fmt.Errorf("--peer %s: no map %q: not fastSwan's xfrm_offload object", path, name)
		}
	}
	if spec.Programs[peerProg] == nil {
		return nil, fmt.Errorf("--peer %s: no program %q: not fastSwan's xfrm_offload object", path, peerProg)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("--peer %s: loading: %w", path, err)
	}
	p := &peer{coll: coll, prog: coll.Programs[peerProg]}
	if err := p.fill(snap, ports); err != nil {
		coll.Close()
		return nil, err
	}
	return p, nil
}

func (p *peer) Close() { p.coll.Close() }

func (p *peer) fill(snap fastpath.Snapshot, ports []int) error {
	dstIDs := map[netip.Prefix]uint32{}
	slot := uint32(0)
	for _, pol := range snap.Policies {
		if pol.Offload == nil || pol.Offload.Flags&xfrm.OffloadPacket == 0 || !pol.Sel.Dst.Addr().Is4() {
			continue
		}
		var flags uint8
		switch pol.Dir {
		case xfrm.DirIn:
			flags = peerFlagIngress
		case xfrm.DirOut:
			flags = peerFlagEgress
		default:
			continue
		}
		dst := pol.Sel.Dst.Masked()
		id, ok := dstIDs[dst]
		if !ok {
			id = uint32(len(dstIDs))
			dstIDs[dst] = id
			k := make([]byte, 8)
			binary.NativeEndian.PutUint32(k, uint32(dst.Bits()))
			a := dst.Addr().As4()
			copy(k[4:], a[:])
			if err := p.coll.Maps["dst_lpm"].Put(k, id); err != nil {
				return fmt.Errorf("peer dst_lpm %s: %w", dst, err)
			}
		}
		src := pol.Sel.Src.Masked()
		k := make([]byte, 12)
		binary.NativeEndian.PutUint32(k, uint32(32+src.Bits()))
		binary.NativeEndian.PutUint32(k[4:], id)
		a := src.Addr().As4()
		copy(k[8:], a[:])
		slot++
		v := make([]byte, peerPolicyValLen)
		binary.NativeEndian.PutUint32(v, uint32(pol.Offload.Ifindex))
		binary.NativeEndian.PutUint32(v[4:], slot) // stats on, as fastSwan allocates them
		v[8] = flags
		if err := p.coll.Maps["policy_lpm"].Put(k, v); err != nil {
			return fmt.Errorf("peer policy_lpm %s -> %s: %w", src, dst, err)
		}
	}
	for _, ifindex := range ports {
		if err := p.coll.Maps["redirect_map"].Put(uint32(ifindex), uint32(ifindex)); err != nil {
			return fmt.Errorf("peer redirect_map %d: %w", ifindex, err)
		}
	}
	return nil
}

// measure runs the peer on frame repeat times (a forward, in batches of
// ttlBatch as sluice's, since it too decrements the TTL in place) and
// returns its action and the mean cost.
func (p *peer) measure(frame []byte, repeat int) (uint32, float64, int, error) {
	ret, _, err := p.prog.Benchmark(frame, 1, nil)
	if err != nil {
		return 0, 0, 0, err
	}
	batch := repeat
	if ret == fastpath.XDPRedirect || ret == fastpath.XDPTx {
		repeat = min(repeat, maxForwardBatches*ttlBatch)
		batch = ttlBatch
	}
	var total float64
	for done := 0; done < repeat; {
		n := min(batch, repeat-done)
		r, per, err := p.prog.Benchmark(frame, n, nil)
		if err != nil {
			return 0, 0, 0, err
		}
		if r != ret {
			return 0, 0, 0, fmt.Errorf("peer: %s, then %s for the same frame", fastpath.ActionName(ret), fastpath.ActionName(r))
		}
		total += float64(per.Nanoseconds()) * float64(n)
		done += n
	}
	return ret, total / float64(repeat), repeat, nil
}
