// SPDX-License-Identifier: Apache-2.0

package hwcheck

import (
	"crypto/rand"
	"fmt"
	"net/netip"

	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// The scenarios' SAs and policies: manual keys, AES-GCM-128 (what mlx5
// and the model offload), tunnel mode between the link addresses. Keys
// are random per run and never printed.

const aead = "rfc4106(gcm(aes))"

// sa is one SA of a scenario.
type sa struct {
	spi, reqid uint32
	out        bool // A -> B (else B -> A)
	offload    bool // packet offload on the port (A's SAs only)
	esn        bool
	window     int
	oseq       uint64
	key        []byte // shared by the two ends of one SA
}

// newKey is 16 bytes of AES key and 4 of salt.
func newKey() []byte {
	k := make([]byte, 20)
	_, _ = rand.Read(k) // never fails (crypto/rand panics rather)
	return k
}

// addSA installs s in ns (A's or B's), offloaded to the port when asked;
// the scenario's undo list removes it.
func (l *lab) addSA(u *undoList, inA bool, s sa) error {
	src, dst := linkA, linkB
	if !s.out {
		src, dst = linkB, linkA
	}
	st := xfrm.ESPState{Src: src, Dst: dst, SPI: s.spi, Reqid: s.reqid, Tunnel: true, AEAD: aead, Key: s.key,
		ICVBits: 128, ESN: s.esn, ReplayWindow: s.window, OSeq: s.oseq}
	in := l.inB
	if inA {
		in = l.inA
	}
	err := in(func() error {
		if s.offload {
			idx, err := ifindex(l.port)
			if err != nil {
				return err
			}
			st.Offload = &xfrm.Offload{Ifindex: idx, Flags: xfrm.OffloadPacket}
			if !s.out {
				st.Offload.Flags |= xfrm.OffloadInbound
			}
		}
		return xfrm.StateAddESP(st)
	})
	if err != nil {
		if s.offload {
			return fmt.Errorf("%w: %s refused a packet-offload SA (does it have IPsec packet offload? `sluice doctor --check offload-probe`)", err, l.port)
		}
		return err
	}
	u.add(fmt.Sprintf("delete SA spi %#x", s.spi), func() error {
		return in(func() error { return ignoreGone(xfrm.StateDelete(dst, s.spi)) })
	})
	return nil
}

// policy is one ESP policy of a scenario: its template is the tunnel of
// the SA with the same reqid.
type policy struct {
	src, dst netip.Prefix
	out      bool
	reqid    uint32
	offload  bool
}

func (l *lab) addPolicy(u *undoList, inA bool, p policy) error {
	dir, tsrc, tdst := xfrm.DirOut, linkA, linkB
	if !p.out {
		dir, tsrc, tdst = xfrm.DirIn, linkB, linkA
	}
	if !inA { // B's view: its OUT goes B -> A
		tsrc, tdst = tdst, tsrc
	}
	pol := xfrm.ESPPolicy{Dir: dir, Src: p.src, Dst: p.dst, TmplSrc: tsrc, TmplDst: tdst, Reqid: p.reqid, Tunnel: true}
	in := l.inB
	if inA {
		in = l.inA
	}
	err := in(func() error {
		if p.offload {
			idx, err := ifindex(l.port)
			if err != nil {
				return err
			}
			// A policy takes its direction from dir: the kernel refuses
			// XFRM_OFFLOAD_INBOUND on one (xfrm_dev_policy_add).
			pol.Offload = &xfrm.Offload{Ifindex: idx, Flags: xfrm.OffloadPacket}
		}
		return xfrm.PolicyAdd(pol, false)
	})
	if err != nil {
		return err
	}
	u.add(fmt.Sprintf("delete policy %s -> %s", p.src, p.dst), func() error {
		return in(func() error { return ignoreGone(xfrm.PolicyDelete(dir, p.src, p.dst)) })
	})
	return nil
}

func ignoreGone(err error) error {
	if err != nil && kernel.IsNotExist(err) {
		return nil
	}
	return err
}

// undoList is what a scenario (or the lab) must undo, last first.
type undoList []undoStep

func (u *undoList) add(what string, fn func() error) { *u = append(*u, undoStep{what, fn}) }

// deleteSA removes an SA in the calling thread's namespace.
func deleteSA(dst netip.Addr, spi uint32) error { return xfrm.StateDelete(dst, spi) }

func hostPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }
