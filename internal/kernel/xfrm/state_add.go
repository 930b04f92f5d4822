// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// StateAdd installs the SA st (`ip xfrm state add`), bound to the device in
// off when off is not nil; it is the one way sluice installs an SA (apply,
// the offload and feature probes). XFRMA_OFFLOAD_DEV is the one attribute
// vishvananda/netlink cannot send. Everything else follows its XfrmStateAdd;
// fields it cannot express (Pcpunum) are refused rather than dropped.
func (x *Handle) StateAdd(st *netlink.XfrmState, off *Offload) error {
	req, err := newSARequest(st, off)
	if err != nil {
		return err
	}
	if err := x.execute(req, 0, nil); err != nil {
		return fmt.Errorf("xfrm state add %s->%s spi %#x: %w", st.Src, st.Dst, st.Spi, err)
	}
	return nil
}

// StateAdd installs an SA in the current namespace; see Handle.StateAdd.
func StateAdd(st *netlink.XfrmState, off *Offload) error { return (&Handle{}).StateAdd(st, off) }

// ESPState is an AEAD ESP SA as sluice's overlay installs it.
type ESPState struct {
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

// ErrSeqAbove32Bits: StateAddESP carries sequence numbers over in the
// 32-bit replay state (XFRMA_REPLAY_VAL), not the ESN one, so a number
// past 2^32-1 cannot be carried over.
var ErrSeqAbove32Bits = errors.New("needs its upper 32 bits, which sluice does not send")

// StateAddESP installs s through StateAdd.
func StateAddESP(s ESPState) error {
	mode := netlink.XFRM_MODE_TRANSPORT
	if s.Tunnel {
		mode = netlink.XFRM_MODE_TUNNEL
	}
	st := &netlink.XfrmState{
		Src: net.IP(s.Src.AsSlice()), Dst: net.IP(s.Dst.AsSlice()),
		Proto: netlink.XFRM_PROTO_ESP, Mode: mode, Spi: int(s.SPI), Reqid: int(s.Reqid),
		ReplayWindow: s.ReplayWindow, ESN: s.ESN,
		Aead: &netlink.XfrmStateAlgo{Name: s.AEAD, Key: s.Key, ICVLen: s.ICVBits},
	}
	if s.OSeq != 0 || s.Seq != 0 {
		if s.OSeq > math.MaxUint32 || s.Seq > math.MaxUint32 {
			return fmt.Errorf("xfrm state add spi %#x: carrying over sequence number %d/%d %w", s.SPI, s.OSeq, s.Seq, ErrSeqAbove32Bits)
		}
		st.Replay = &netlink.XfrmReplayState{OSeq: uint32(s.OSeq), Seq: uint32(s.Seq)}
	}
	return StateAdd(st, s.Offload)
}

// StateDelete removes the ESP SA (dst, spi) (`ip xfrm state delete`).
func StateDelete(dst netip.Addr, spi uint32) error {
	err := netlink.XfrmStateDel(&netlink.XfrmState{Dst: net.IP(dst.AsSlice()), Proto: netlink.XFRM_PROTO_ESP, Spi: int(spi)})
	if err != nil {
		return fmt.Errorf("xfrm state delete dst %s spi %#x: %w", dst, spi, err)
	}
	return nil
}

// newSARequest builds the XFRM_MSG_NEWSA request; flags as iproute2's.
func newSARequest(st *netlink.XfrmState, off *Offload) (*nl.NetlinkRequest, error) {
	body, err := encodeNewSA(st, off)
	if err != nil {
		return nil, err
	}
	return xfrmRequest(nl.XFRM_MSG_NEWSA, unix.NLM_F_ACK, body), nil
}

// encodeNewSA builds the XFRM_MSG_NEWSA body: struct xfrm_usersa_info and
// attributes in iproute2's order (algorithms, offload, mark, if_id), so the
// bytes can be compared with what `ip xfrm state add` sends.
func encodeNewSA(st *netlink.XfrmState, off *Offload) ([]byte, error) {
	switch {
	case st.Spi == 0:
		return nil, fmt.Errorf("xfrm state: spi must be set (an SA with spi 0 cannot be deleted)")
	case st.Src == nil || st.Dst == nil || (st.Src.To4() == nil) != (st.Dst.To4() == nil):
		return nil, fmt.Errorf("xfrm state: src %v and dst %v must both be set and of one family", st.Src, st.Dst)
	case st.ESN && st.ReplayWindow == 0:
		return nil, fmt.Errorf("xfrm state: esn needs a replay window")
	case st.Pcpunum != nil:
		return nil, fmt.Errorf("xfrm state: per-CPU SAs (Pcpunum) are not supported here")
	}
	if off != nil {
		if err := off.validate(); err != nil {
			return nil, err
		}
	}
	b := make([]byte, xfrmSAInfoLen, 512)
	if st.Selector != nil {
		putSelector(b, st.Selector)
	}
	family := uint16(unix.AF_INET6)
	if st.Dst.To4() != nil {
		family = unix.AF_INET
	}
	putAddr(b[saDaddr:], st.Dst)
	be.PutUint32(b[saSPI:], uint32(st.Spi))
	b[saProto] = uint8(st.Proto)
	putAddr(b[saSaddr:], st.Src)
	lft := b[saLft:]
	for _, l := range [...]struct {
		off int
		v   uint64
	}{{lftSoftByte, st.Limits.ByteSoft}, {lftHardByte, st.Limits.ByteHard}, {lftSoftPacket, st.Limits.PacketSoft}, {lftHardPacket, st.Limits.PacketHard}} {
		if l.v == 0 {
			l.v = nl.XFRM_INF // as iproute2: no limit unless one is given
		}
		ne.PutUint64(lft[l.off:], l.v)
	}
	ne.PutUint64(lft[lftSoftAdd:], st.Limits.TimeSoft)
	ne.PutUint64(lft[lftHardAdd:], st.Limits.TimeHard)
	ne.PutUint64(lft[lftSoftUse:], st.Limits.TimeUseSoft)
	ne.PutUint64(lft[lftHardUse:], st.Limits.TimeUseHard)
	ne.PutUint32(b[saReqid:], uint32(st.Reqid))
	ne.PutUint16(b[saFamily:], family)
	b[saMode] = uint8(st.Mode)
	b[saReplayWindow] = uint8(st.ReplayWindow)
	if st.ESN {
		b[saReplayWindow], b[saFlags] = 0, nl.XFRM_STATE_ESN // the window moves to XFRMA_REPLAY_ESN_VAL
	}
	if a := st.Auth; a != nil {
		b = putAttr(b, nl.XFRMA_ALG_AUTH_TRUNC, algo(a.Name, a.Key, uint32(a.TruncateLen), true))
	}
	if a := st.Crypt; a != nil {
		b = putAttr(b, nl.XFRMA_ALG_CRYPT, algo(a.Name, a.Key, 0, false))
	}
	if a := st.Aead; a != nil {
		b = putAttr(b, nl.XFRMA_ALG_AEAD, algo(a.Name, a.Key, uint32(a.ICVLen), true))
	}
	if e := st.Encap; e != nil {
		v := make([]byte, nl.SizeofXfrmEncapTmpl)
		ne.PutUint16(v[encapType:], uint16(e.Type))
		be.PutUint16(v[encapSport:], uint16(e.SrcPort))
		be.PutUint16(v[encapDport:], uint16(e.DstPort))
		putAddr(v[encapOA:], e.OriginalAddress)
		b = putAttr(b, nl.XFRMA_ENCAP, v)
	}
	if off != nil {
		b = putAttr(b, nl.XFRMA_OFFLOAD_DEV, off.MarshalAttr())
	}
	if m := st.Mark; m != nil {
		mask := m.Mask
		if mask == 0 {
			mask = ^uint32(0) // vishvananda's convention: a bare mark matches exactly
		}
		b = putAttr(b, nl.XFRMA_MARK, marshalMark(m.Value, mask))
	}
	if st.ESN {
		words := (st.ReplayWindow + 31) / 32
		v := make([]byte, xfrmReplayESNLen+4*words) // the header, then the bitmap
		ne.PutUint32(v[replayESNBmpLen:], uint32(words))
		ne.PutUint32(v[replayESNWindow:], uint32(st.ReplayWindow))
		if r := st.Replay; r != nil { // where the sequence numbers start
			ne.PutUint32(v[replayESNOseq:], r.OSeq)
			ne.PutUint32(v[replayESNSeq:], r.Seq)
		}
		b = putAttr(b, nl.XFRMA_REPLAY_ESN_VAL, v)
	}
	if m := st.OutputMark; m != nil {
		b = putAttr(b, nl.XFRMA_SET_MARK, ne.AppendUint32(nil, m.Value))
		if m.Mask != 0 {
			b = putAttr(b, nl.XFRMA_SET_MARK_MASK, ne.AppendUint32(nil, m.Mask))
		}
	}
	var xflags uint32
	if st.DontEncapDSCP {
		xflags |= nl.XFRM_SA_XFLAG_DONT_ENCAP_DSCP
	}
	if st.OSeqMayWrap {
		xflags |= nl.XFRM_SA_XFLAG_OSEQ_MAY_WRAP
	}
	if xflags != 0 {
		b = putAttr(b, nl.XFRMA_SA_EXTRA_FLAGS, ne.AppendUint32(nil, xflags))
	}
	if r := st.Replay; r != nil {
		b = putAttr(b, nl.XFRMA_REPLAY_VAL, ne.AppendUint32(ne.AppendUint32(ne.AppendUint32(nil, r.OSeq), r.Seq), r.BitMap))
	}
	if st.SADir != 0 {
		b = putAttr(b, nl.XFRMA_SA_DIR, []byte{uint8(st.SADir)})
	}
	if st.Ifid != 0 {
		b = putAttr(b, nl.XFRMA_IF_ID, ne.AppendUint32(nil, uint32(st.Ifid)))
	}
	return b, nil
}
