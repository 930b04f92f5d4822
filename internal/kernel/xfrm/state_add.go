// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// StateAdd installs the SA st (`ip xfrm state add`), bound to the device in
// off when off is not nil: XFRMA_OFFLOAD_DEV is the one attribute
// vishvananda/netlink cannot send. Everything else follows its XfrmStateAdd;
// fields it cannot express (Pcpunum) are refused rather than dropped.
func (x *XFRM) StateAdd(st *netlink.XfrmState, off *Offload) error {
	req, err := newSARequest(st, off)
	if err != nil {
		return err
	}
	if err := x.execute(req, 0, nil); err != nil {
		return fmt.Errorf("xfrm state add %s->%s spi %#x: %w", st.Src, st.Dst, st.Spi, err)
	}
	return nil
}

// StateAdd installs an SA in the current namespace; see XFRM.StateAdd.
func StateAdd(st *netlink.XfrmState, off *Offload) error { return (&XFRM{}).StateAdd(st, off) }

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
	putAddr(b[56:], st.Dst)
	be.PutUint32(b[72:], uint32(st.Spi))
	b[76] = uint8(st.Proto)
	putAddr(b[80:], st.Src)
	lim := []uint64{st.Limits.ByteSoft, st.Limits.ByteHard, st.Limits.PacketSoft, st.Limits.PacketHard}
	for i, v := range lim {
		if v == 0 {
			v = nl.XFRM_INF // as iproute2: no limit unless one is given
		}
		ne.PutUint64(b[96+8*i:], v)
	}
	for i, v := range []uint64{st.Limits.TimeSoft, st.Limits.TimeHard, st.Limits.TimeUseSoft, st.Limits.TimeUseHard} {
		ne.PutUint64(b[128+8*i:], v)
	}
	ne.PutUint32(b[208:], uint32(st.Reqid))
	ne.PutUint16(b[212:], family)
	b[214] = uint8(st.Mode)
	b[215] = uint8(st.ReplayWindow)
	if st.ESN {
		b[215], b[216] = 0, nl.XFRM_STATE_ESN // the window moves to XFRMA_REPLAY_ESN_VAL
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
		v := make([]byte, nl.SizeofXfrmEncapTmpl) // type, sport, dport, pad, oa
		ne.PutUint16(v, uint16(e.Type))
		be.PutUint16(v[2:], uint16(e.SrcPort))
		be.PutUint16(v[4:], uint16(e.DstPort))
		putAddr(v[8:], e.OriginalAddress)
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
		b = putAttr(b, nl.XFRMA_MARK, ne.AppendUint32(ne.AppendUint32(nil, m.Value), mask))
	}
	if st.ESN {
		v := make([]byte, 24+4*((st.ReplayWindow+31)/32)) // xfrm_replay_state_esn + bitmap
		ne.PutUint32(v, uint32((st.ReplayWindow+31)/32))
		ne.PutUint32(v[20:], uint32(st.ReplayWindow))
		if r := st.Replay; r != nil { // where the sequence numbers start: oseq, seq
			ne.PutUint32(v[4:], r.OSeq)
			ne.PutUint32(v[8:], r.Seq)
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

// putSelector writes struct xfrm_selector the way vishvananda does (a
// given port matches exactly), taking the family from whichever side is set.
func putSelector(b []byte, p *netlink.XfrmPolicy) {
	family := uint16(unix.AF_INET)
	for _, n := range []*net.IPNet{p.Dst, p.Src} {
		if n != nil && n.IP.To4() == nil {
			family = unix.AF_INET6
		}
	}
	if p.Dst != nil {
		putAddr(b[0:], p.Dst.IP)
		ones, _ := p.Dst.Mask.Size()
		b[42] = uint8(ones)
	}
	if p.Src != nil {
		putAddr(b[16:], p.Src.IP)
		ones, _ := p.Src.Mask.Size()
		b[43] = uint8(ones)
	}
	if p.DstPort != 0 {
		be.PutUint16(b[32:], uint16(p.DstPort))
		be.PutUint16(b[34:], 0xffff)
	}
	if p.SrcPort != 0 {
		be.PutUint16(b[36:], uint16(p.SrcPort))
		be.PutUint16(b[38:], 0xffff)
	}
	ne.PutUint16(b[40:], family)
	b[44] = uint8(p.Proto)
	ne.PutUint32(b[48:], uint32(int32(p.Ifindex)))
}

// putAddr writes an xfrm_address_t: IPv4 in the first 4 bytes.
func putAddr(b []byte, ip net.IP) {
	if v4 := ip.To4(); v4 != nil {
		copy(b[:4], v4)
	} else {
		copy(b[:16], ip.To16())
	}
}

// algo encodes struct xfrm_algo (name, key bits, key) or, with extra, the
// _auth/_aead variants whose third field is the truncation/ICV length.
func algo(name string, key []byte, extra uint32, hasExtra bool) []byte {
	v := make([]byte, 64, 72+len(key))
	copy(v[:63], name)
	v = ne.AppendUint32(v, uint32(len(key)*8))
	if hasExtra {
		v = ne.AppendUint32(v, extra)
	}
	return append(v, key...)
}

// putAttr appends one netlink attribute, padded to 4 bytes.
func putAttr(b []byte, typ uint16, v []byte) []byte {
	b = ne.AppendUint16(b, uint16(unix.SizeofRtAttr+len(v)))
	b = ne.AppendUint16(b, typ)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
