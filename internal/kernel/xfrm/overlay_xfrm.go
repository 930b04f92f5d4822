// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"crypto/sha256"
	"fmt"
	"math"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The XFRM operations of `sluice apply`: SAs with their key digests (so
// a changed key is seen without the key ever leaving this file), SA
// add/delete, and policies with XFRMA_OFFLOAD_DEV, which
// vishvananda/netlink cannot send.

// OvSA is an SA as the overlay planner compares it.
type OvSA struct {
	State
	// ESN and ReplayWindow as installed (the window from
	// XFRMA_REPLAY_ESN_VAL when ESN is on).
	ESN          bool
	ReplayWindow uint32
	// AEAD is the algorithm name, ICVBits its ICV length and KeyBits the
	// key length (salt included); empty for non-AEAD SAs.
	AEAD    string
	ICVBits uint32
	KeyBits uint32
	// KeyDigest is SHA-256 of the key material; the key itself is not
	// kept.
	KeyDigest [32]byte
	// Packets and Bytes are the SA's lifetime counters.
	Packets, Bytes uint64
	// OSeq is the last sequence number sent, Seq the highest received
	// (XFRMA_REPLAY_ESN_VAL, else XFRMA_REPLAY_VAL; 64-bit with ESN). For
	// a packet-offloaded SA the device counts, and they may stay 0.
	OSeq, Seq uint64
}

// KeyDigest is the digest OvSA.KeyDigest holds for key.
func KeyDigest(key []byte) [32]byte { return sha256.Sum256(key) }

// OverlaySAs dumps the SAs of the calling thread's namespace with what the
// overlay compares: mode, reqid, ESN, replay window, algorithm, key digest
// and offload.
func OverlaySAs() ([]OvSA, error) {
	x := &XFRM{}
	ss, err := xfrmDump(x, nl.XFRM_MSG_GETSA, nl.XFRM_MSG_NEWSA, parseOvSA)
	if err != nil {
		return nil, fmt.Errorf("dump xfrm states: %w", err)
	}
	return ss, nil
}

func parseOvSA(b []byte) (OvSA, error) {
	st, err := parseStateMsg(b)
	if err != nil {
		return OvSA{}, err
	}
	sa := OvSA{State: st, ReplayWindow: uint32(b[215]), ESN: b[216]&nl.XFRM_STATE_ESN != 0}
	// struct xfrm_lifetime_cur at 160: bytes, packets, add_time, use_time.
	sa.Bytes, sa.Packets = ne.Uint64(b[160:]), ne.Uint64(b[168:])
	a, err := xfrmAttrs(b[xfrmSAInfoLen:])
	if err != nil {
		return OvSA{}, err
	}
	if v, ok := a[nl.XFRMA_REPLAY_ESN_VAL]; ok && len(v) >= 24 {
		sa.ReplayWindow = ne.Uint32(v[20:])
		// struct xfrm_replay_state_esn: bmp_len, oseq, seq, oseq_hi, seq_hi, replay_window.
		sa.OSeq = uint64(ne.Uint32(v[12:]))<<32 | uint64(ne.Uint32(v[4:]))
		sa.Seq = uint64(ne.Uint32(v[16:]))<<32 | uint64(ne.Uint32(v[8:]))
	} else if v, ok := a[nl.XFRMA_REPLAY_VAL]; ok && len(v) >= 8 {
		sa.OSeq, sa.Seq = uint64(ne.Uint32(v[0:])), uint64(ne.Uint32(v[4:]))
	}
	if v, ok := a[nl.XFRMA_ALG_AEAD]; ok && len(v) >= 72 {
		sa.AEAD = unix.ByteSliceToString(v[:64])
		sa.KeyBits, sa.ICVBits = ne.Uint32(v[64:]), ne.Uint32(v[68:])
		key := v[72:]
		if n := int(sa.KeyBits+7) / 8; n <= len(key) {
			key = key[:n]
		}
		sa.KeyDigest = sha256.Sum256(key)
	}
	return sa, nil
}

// OvSAConfig is an SA to install.
type OvSAConfig struct {
	Src, Dst     netip.Addr
	SPI, Reqid   uint32
	Tunnel       bool
	AEAD         string
	Key          []byte
	ICVBits      int
	ESN          bool
	ReplayWindow int
	// Offload, when not nil, binds the SA to a device (crypto or packet,
	// in or out).
	Offload *Offload
	// OSeq and Seq start the SA's sequence numbers (last sent, highest
	// received) where an SA it replaces left them, so a key installed
	// again never repeats a sequence number (with AES-GCM, a nonce).
	// Beyond 32 bits they need ESN.
	OSeq, Seq uint64
}

// SAAdd installs an SA (`ip xfrm state add`).
func SAAdd(c OvSAConfig) error {
	mode := netlink.XFRM_MODE_TRANSPORT
	if c.Tunnel {
		mode = netlink.XFRM_MODE_TUNNEL
	}
	st := &netlink.XfrmState{
		Src: net.IP(c.Src.AsSlice()), Dst: net.IP(c.Dst.AsSlice()),
		Proto: netlink.XFRM_PROTO_ESP, Mode: mode, Spi: int(c.SPI), Reqid: int(c.Reqid),
		ReplayWindow: c.ReplayWindow, ESN: c.ESN,
		Aead: &netlink.XfrmStateAlgo{Name: c.AEAD, Key: c.Key, ICVLen: c.ICVBits},
	}
	if c.OSeq != 0 || c.Seq != 0 {
		if c.OSeq > math.MaxUint32 || c.Seq > math.MaxUint32 {
			return fmt.Errorf("xfrm state add spi %#x: carrying over sequence number %d/%d needs its upper 32 bits, which sluice does not send: use a new key", c.SPI, c.OSeq, c.Seq)
		}
		st.Replay = &netlink.XfrmReplayState{OSeq: uint32(c.OSeq), Seq: uint32(c.Seq)}
	}
	return StateAdd(st, c.Offload)
}

// SADelete removes the ESP SA (dst, spi) (`ip xfrm state delete`).
func SADelete(dst netip.Addr, spi uint32) error {
	err := netlink.XfrmStateDel(&netlink.XfrmState{Dst: net.IP(dst.AsSlice()), Proto: netlink.XFRM_PROTO_ESP, Spi: int(spi)})
	if err != nil {
		return fmt.Errorf("xfrm state delete dst %s spi %#x: %w", dst, spi, err)
	}
	return nil
}

// OvPolicy is a policy to install: one ESP template, optionally offloaded.
type OvPolicy struct {
	Dir      Dir
	Src, Dst netip.Prefix
	Priority uint32
	// Template: the SA endpoints (tunnel mode only), reqid, mode.
	TmplSrc, TmplDst netip.Addr
	Reqid            uint32
	Tunnel           bool
	Offload          *Offload
}

// PolicyAdd installs (or, with update, replaces) a policy
// (`ip xfrm policy add|update`).
func PolicyAdd(p OvPolicy, update bool) error {
	typ, flags := nl.XFRM_MSG_NEWPOLICY, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK
	if update {
		typ, flags = nl.XFRM_MSG_UPDPOLICY, unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK
	}
	body, err := encodePolicy(p)
	if err != nil {
		return err
	}
	if err := (&XFRM{}).execute(xfrmRequest(typ, flags, body), 0, nil); err != nil {
		return fmt.Errorf("xfrm policy add src %s dst %s dir %s: %w", p.Src, p.Dst, p.Dir, err)
	}
	return nil
}

// encodePolicy builds struct xfrm_userpolicy_info, one XFRMA_TMPL and
// XFRMA_OFFLOAD_DEV.
func encodePolicy(p OvPolicy) ([]byte, error) {
	if !p.Src.IsValid() || !p.Dst.IsValid() || p.Src.Addr().Is4() != p.Dst.Addr().Is4() {
		return nil, fmt.Errorf("xfrm policy: src %v and dst %v must both be set and of one family", p.Src, p.Dst)
	}
	if p.Offload != nil {
		if err := p.Offload.validate(); err != nil {
			return nil, err
		}
	}
	b := make([]byte, xfrmPolicyInfoLen, 512)
	putSelector(b, &netlink.XfrmPolicy{Src: prefixNet(p.Src), Dst: prefixNet(p.Dst)})
	// struct xfrm_lifetime_cfg at 56: byte and packet limits "infinite".
	for i := 0; i < 4; i++ {
		ne.PutUint64(b[56+8*i:], nl.XFRM_INF)
	}
	ne.PutUint32(b[152:], p.Priority)
	b[160] = uint8(p.Dir)
	// action allow (0), flags 0, share any (0)
	t := make([]byte, xfrmTmplLen)
	family := uint16(unix.AF_INET)
	if !p.Src.Addr().Is4() {
		family = unix.AF_INET6
	}
	if p.Tunnel {
		putAddr(t[0:], net.IP(p.TmplDst.AsSlice()))
		putAddr(t[28:], net.IP(p.TmplSrc.AsSlice()))
		if p.TmplDst.Is4() {
			family = unix.AF_INET
		} else {
			family = unix.AF_INET6
		}
	}
	t[20] = unix.IPPROTO_ESP
	ne.PutUint16(t[24:], family)
	ne.PutUint32(t[44:], p.Reqid)
	if p.Tunnel {
		t[48] = uint8(netlink.XFRM_MODE_TUNNEL)
	}
	// aalgos, ealgos, calgos: any (as iproute2 sends them).
	ne.PutUint32(t[52:], ^uint32(0))
	ne.PutUint32(t[56:], ^uint32(0))
	ne.PutUint32(t[60:], ^uint32(0))
	b = putAttr(b, nl.XFRMA_TMPL, t)
	if p.Offload != nil {
		b = putAttr(b, nl.XFRMA_OFFLOAD_DEV, p.Offload.MarshalAttr())
	}
	return b, nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	bits := 32
	if !p.Addr().Is4() {
		bits = 128
	}
	return &net.IPNet{IP: net.IP(p.Masked().Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), bits)}
}

// PolicyDelete removes the policy with this selector and direction
// (`ip xfrm policy delete`).
func PolicyDelete(dir Dir, src, dst netip.Prefix) error {
	pol := &netlink.XfrmPolicy{Src: prefixNet(src), Dst: prefixNet(dst), Dir: netlink.Dir(dir)}
	if err := netlink.XfrmPolicyDel(pol); err != nil {
		return fmt.Errorf("xfrm policy delete src %s dst %s dir %s: %w", src, dst, dir, err)
	}
	return nil
}
