// SPDX-License-Identifier: Apache-2.0

package tcflower

import (
	"encoding/binary"
	"net/netip"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"sluice/internal/kernel/nlattr"
)

// The filter requests are encoded by appending to one reused buffer:
// at 65,536 rules the library's attribute trees (a heap object per
// attribute, each serialised and copied again by its parent) cost more
// than the kernel's work under an emulated CPU. The bytes are the same
// (TestFlowerEncodeMatchesLibrary).

// nlAppender appends netlink attributes to b (the message starting at
// b[base]); nest and end bracket a nested attribute, whose length end
// patches in.
type nlAppender struct {
	b    []byte
	base int
}

// attr appends one attribute, padded relative to the message's start
// (base): a batch buffer need not begin aligned.
func (e *nlAppender) attr(typ uint16, data []byte) {
	e.b = binary.NativeEndian.AppendUint16(e.b, uint16(nlattr.HdrLen+len(data)))
	e.b = binary.NativeEndian.AppendUint16(e.b, typ)
	e.b = append(e.b, data...)
	e.pad()
}

func (e *nlAppender) pad() {
	for (len(e.b)-e.base)%4 != 0 {
		e.b = append(e.b, 0)
	}
}

func (e *nlAppender) u8(typ uint16, v uint8) { e.attr(typ, []byte{v}) }

func (e *nlAppender) u16(typ uint16, v uint16) {
	e.b = binary.NativeEndian.AppendUint16(e.b, 6)
	e.b = binary.NativeEndian.AppendUint16(e.b, typ)
	e.b = binary.NativeEndian.AppendUint16(e.b, v)
	e.pad()
}

func (e *nlAppender) be16(typ uint16, v uint16) {
	e.b = binary.NativeEndian.AppendUint16(e.b, 6)
	e.b = binary.NativeEndian.AppendUint16(e.b, typ)
	e.b = binary.BigEndian.AppendUint16(e.b, v)
	e.pad()
}

func (e *nlAppender) u32(typ uint16, v uint32) {
	e.b = binary.NativeEndian.AppendUint16(e.b, 8)
	e.b = binary.NativeEndian.AppendUint16(e.b, typ)
	e.b = binary.NativeEndian.AppendUint32(e.b, v)
}

func (e *nlAppender) u64(typ uint16, v uint64) {
	e.b = binary.NativeEndian.AppendUint16(e.b, 12)
	e.b = binary.NativeEndian.AppendUint16(e.b, typ)
	e.b = binary.NativeEndian.AppendUint64(e.b, v)
}

func (e *nlAppender) be32(typ uint16, v uint32) {
	e.b = binary.NativeEndian.AppendUint16(e.b, 8)
	e.b = binary.NativeEndian.AppendUint16(e.b, typ)
	e.b = binary.BigEndian.AppendUint32(e.b, v)
}

// str appends a NUL-terminated string.
func (e *nlAppender) str(typ uint16, s string) {
	e.b = binary.NativeEndian.AppendUint16(e.b, uint16(4+len(s)+1))
	e.b = binary.NativeEndian.AppendUint16(e.b, typ)
	e.b = append(e.b, s...)
	e.b = append(e.b, 0)
	e.pad()
}

func (e *nlAppender) nest(typ uint16) int {
	at := len(e.b)
	e.b = binary.NativeEndian.AppendUint16(e.b, 0)
	e.b = binary.NativeEndian.AppendUint16(e.b, typ)
	return at
}

func (e *nlAppender) end(at int) {
	nlattr.PatchLen(e.b, at)
}

// structBytes is a fixed kernel struct's bytes. (The library's Serialize
// methods for the structs that begin with tc_gen take 22 bytes for it,
// not 20, and so send two bytes from beyond the struct.)
func structBytes[T any](x *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(x)), unsafe.Sizeof(*x))
}

// prefixMask is a prefix's netmask of size bits (32 or 128).
func prefixMask(bits, size int) []byte {
	var m [16]byte
	for i := 0; i < min(bits, size); i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m[:size/8]
}

// appendRequest appends RTM_NEWTFILTER (or RTM_DELTFILTER with del) with
// the given sequence number to b.
func (f *Filter) appendRequest(b []byte, seq uint32, del bool) []byte {
	typ, flags := uint16(unix.RTM_NEWTFILTER), uint16(unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	if del {
		typ, flags = unix.RTM_DELTFILTER, 0
	}
	start := len(b)
	e := nlAppender{b: b, base: start}
	// struct nlmsghdr: length (patched below), type, flags, seq, pid.
	e.b = binary.NativeEndian.AppendUint32(e.b, 0)
	e.b = binary.NativeEndian.AppendUint16(e.b, typ)
	e.b = binary.NativeEndian.AppendUint16(e.b, unix.NLM_F_REQUEST|flags|unix.NLM_F_ACK)
	e.b = binary.NativeEndian.AppendUint32(e.b, seq)
	e.b = binary.NativeEndian.AppendUint32(e.b, 0)
	// struct tcmsg: family, 3 pad bytes, ifindex, handle, parent, info.
	e.b = append(e.b, nl.FAMILY_ALL, 0, 0, 0)
	e.b = binary.NativeEndian.AppendUint32(e.b, uint32(int32(f.Ifindex)))
	e.b = binary.NativeEndian.AppendUint32(e.b, f.Handle)
	e.b = binary.NativeEndian.AppendUint32(e.b, clsactIngress)
	e.b = binary.NativeEndian.AppendUint32(e.b, uint32(f.Pref)<<16|uint32(htons(f.Protocol())))
	e.u32(nl.TCA_CHAIN, f.Chain)
	e.str(nl.TCA_KIND, "flower")
	if !del {
		f.appendOptions(&e)
	}
	binary.NativeEndian.PutUint32(e.b[start:], uint32(len(e.b)-start))
	return e.b
}

func (f *Filter) appendOptions(e *nlAppender) {
	opts := e.nest(nl.TCA_OPTIONS)
	var clsFlags uint32
	if f.SkipSW {
		clsFlags |= nl.TCA_CLS_FLAGS_SKIP_SW
	}
	if f.SkipHW {
		clsFlags |= nl.TCA_CLS_FLAGS_SKIP_HW
	}
	e.u32(nl.TCA_FLOWER_FLAGS, clsFlags)
	if f.VLANID != 0 {
		e.be16(nl.TCA_FLOWER_KEY_ETH_TYPE, ethP8021Q)
		e.u16(nl.TCA_FLOWER_KEY_VLAN_ID, f.VLANID)
		e.be16(nl.TCA_FLOWER_KEY_VLAN_ETH_TYPE, f.ethType())
	} else {
		e.be16(nl.TCA_FLOWER_KEY_ETH_TYPE, f.ethType())
	}
	if f.DstMAC != nil {
		e.attr(nl.TCA_FLOWER_KEY_ETH_DST, f.DstMAC)
		e.attr(nl.TCA_FLOWER_KEY_ETH_DST_MASK, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	}
	if f.IPProto != 0 {
		e.u8(nl.TCA_FLOWER_KEY_IP_PROTO, f.IPProto)
	}
	prefix := func(p netip.Prefix, k4, m4, k6, m6 uint16) {
		if !p.IsValid() || p.Bits() == 0 {
			return
		}
		k, m, size := k4, m4, 32
		if f.IPv6 {
			k, m, size = k6, m6, 128
		}
		if a := p.Masked().Addr(); a.Is4() {
			a4 := a.As4()
			e.attr(k, a4[:])
		} else {
			a16 := a.As16()
			e.attr(k, a16[:])
		}
		e.attr(m, prefixMask(p.Bits(), size))
	}
	prefix(f.Src, nl.TCA_FLOWER_KEY_IPV4_SRC, nl.TCA_FLOWER_KEY_IPV4_SRC_MASK, nl.TCA_FLOWER_KEY_IPV6_SRC, nl.TCA_FLOWER_KEY_IPV6_SRC_MASK)
	prefix(f.Dst, nl.TCA_FLOWER_KEY_IPV4_DST, nl.TCA_FLOWER_KEY_IPV4_DST_MASK, nl.TCA_FLOWER_KEY_IPV6_DST, nl.TCA_FLOWER_KEY_IPV6_DST_MASK)
	if f.SPortMask|f.DPortMask != 0 {
		var sk, sm, dk, dm uint16 = nl.TCA_FLOWER_KEY_TCP_SRC, nl.TCA_FLOWER_KEY_TCP_SRC_MASK, nl.TCA_FLOWER_KEY_TCP_DST, nl.TCA_FLOWER_KEY_TCP_DST_MASK
		switch f.IPProto {
		case unix.IPPROTO_UDP:
			sk, sm, dk, dm = nl.TCA_FLOWER_KEY_UDP_SRC, nl.TCA_FLOWER_KEY_UDP_SRC_MASK, nl.TCA_FLOWER_KEY_UDP_DST, nl.TCA_FLOWER_KEY_UDP_DST_MASK
		case unix.IPPROTO_SCTP:
			sk, sm, dk, dm = nl.TCA_FLOWER_KEY_SCTP_SRC, nl.TCA_FLOWER_KEY_SCTP_SRC_MASK, nl.TCA_FLOWER_KEY_SCTP_DST, nl.TCA_FLOWER_KEY_SCTP_DST_MASK
		}
		if f.SPortMask != 0 {
			e.be16(sk, f.SPort)
			e.be16(sm, f.SPortMask)
		}
		if f.DPortMask != 0 {
			e.be16(dk, f.DPort)
			e.be16(dm, f.DPortMask)
		}
	}
	if f.TTLMask != 0 {
		e.u8(nl.TCA_FLOWER_KEY_IP_TTL, f.TTL)
		e.u8(nl.TCA_FLOWER_KEY_IP_TTL_MASK, f.TTLMask)
	}
	if f.NoFrag {
		e.be32(nl.TCA_FLOWER_KEY_FLAGS, 0)
		e.be32(nl.TCA_FLOWER_KEY_FLAGS_MASK, flowDisIsFrag)
	}
	acts := e.nest(nl.TCA_FLOWER_ACT)
	for i := range f.Actions {
		at := e.nest(uint16(i + 1))
		f.Actions[i].appendTo(e)
		e.end(at)
	}
	e.end(acts)
	e.end(opts)
}

// appendTo appends the action's kind and options (inside its numbered
// attribute).
func (a *Action) appendTo(e *nlAppender) {
	gen := func(action int32) nl.TcGen { return nl.TcGen{Action: action} }
	options := func(kind string) int {
		e.str(nl.TCA_ACT_KIND, kind)
		return e.nest(nl.TCA_ACT_OPTIONS)
	}
	switch a.Kind {
	case ActPass:
		o := options("gact")
		g := gen(tcActOK)
		e.attr(nl.TCA_GACT_PARMS, structBytes(&g))
		e.end(o)
	case ActPoliceMTU:
		o := options("police")
		// Over the MTU: TC_ACT_OK ends classification, the packet goes to
		// the host (the kernel sends ICMP / packet too big). Within it:
		// pipe to the next action.
		p := nl.TcPolice{Action: tcActOK, Mtu: a.MTU}
		e.attr(nl.TCA_POLICE_TBF, structBytes(&p))
		e.u32(nl.TCA_POLICE_RESULT, tcActPipe)
		e.end(o)
	case ActPoliceUse:
		o := options("police")
		// One packet a second conforms and goes to the host (TC_ACT_OK:
		// the kernel forwards it, stamping the XFRM policies' use times);
		// the rest exceed and pipe on to the forward. The burst is a time
		// (PSCHED ticks of 64 ns): one packet at one per second.
		p := nl.TcPolice{Action: tcActPipe}
		e.attr(nl.TCA_POLICE_TBF, structBytes(&p))
		e.u32(nl.TCA_POLICE_RESULT, tcActOK)
		e.u64(tcaPolicePktRate64, 1)
		e.u64(tcaPolicePktBurst64, uint64(time.Second.Nanoseconds()>>6))
		e.end(o)
	case ActVLANPop, ActVLANPush:
		o := options("vlan")
		v := nl.TcVlan{TcGen: gen(tcActPipe), Action: 1}
		if a.Kind == ActVLANPush {
			v.Action = 2
		}
		e.attr(nl.TCA_VLAN_PARMS, structBytes(&v))
		if a.Kind == ActVLANPush {
			e.u16(nl.TCA_VLAN_PUSH_VLAN_ID, a.VLANID)
			e.be16(nl.TCA_VLAN_PUSH_VLAN_PROTOCOL, ethP8021Q)
		}
		e.end(o)
	case ActDecTTL, ActSetMACs:
		p := peditFor(a)
		o := options("pedit")
		// TCA_PEDIT_PARMS_EX: struct tc_pedit_sel, then its keys.
		parms := e.nest(nl.TCA_PEDIT_PARMS_EX) // not nested: one value appended in pieces
		e.b = append(e.b, structBytes(&p.Sel)...)
		for i := range p.Keys {
			e.b = append(e.b, structBytes(&p.Keys[i])...)
		}
		e.end(parms)
		e.pad()
		keys := e.nest(nl.TCA_PEDIT_KEYS_EX | nl.NLA_F_NESTED)
		for _, ex := range p.KeysEx {
			k := e.nest(nl.TCA_PEDIT_KEY_EX | nl.NLA_F_NESTED)
			e.u16(nl.TCA_PEDIT_KEY_EX_HTYPE, uint16(ex.HeaderType))
			e.u16(nl.TCA_PEDIT_KEY_EX_CMD, uint16(ex.Cmd))
			e.end(k)
		}
		e.end(keys)
		e.end(o)
	case ActCsumIP:
		o := options("csum")
		c := nl.TcCsum{TcGen: gen(tcActPipe), UpdateFlags: 1} // TCA_CSUM_UPDATE_FLAG_IPV4HDR
		e.attr(nl.TCA_CSUM_PARMS, structBytes(&c))
		e.end(o)
	case ActRedirect:
		o := options("mirred")
		m := nl.TcMirred{TcGen: gen(tcActStolen), Eaction: 1, Ifindex: uint32(a.Ifindex)} // TCA_EGRESS_REDIR
		e.attr(nl.TCA_MIRRED_PARMS, structBytes(&m))
		e.end(o)
	}
}

// peditFor is the pedit action that rewrites the MACs or decrements the
// TTL / hop limit.
func peditFor(a *Action) nl.TcPedit {
	p := nl.TcPedit{}
	p.Sel.Action = tcActPipe
	if a.Kind == ActSetMACs {
		p.SetEthDst(a.DstMAC)
		p.SetEthSrc(a.SrcMAC)
	} else {
		// Adding 0xff to the byte is a decrement (it wraps); the mask
		// keeps the other three bytes of the 32-bit word, and the
		// kernel and the NIC drop the carry. Words are read in host
		// order: the TTL is byte 0 of the IPv4 word at offset 8, the
		// hop limit byte 3 of the IPv6 word at offset 4.
		key := nl.TcPeditKey{Off: 8, Val: 0xff, Mask: 0xffffff00}
		ex := nl.TcPeditKeyEx{HeaderType: nl.TCA_PEDIT_KEY_EX_HDR_TYPE_IP4, Cmd: nl.TCA_PEDIT_KEY_EX_CMD_ADD}
		if a.Hoplimit {
			key = nl.TcPeditKey{Off: 4, Val: 0xff000000, Mask: 0x00ffffff}
			ex.HeaderType = nl.TCA_PEDIT_KEY_EX_HDR_TYPE_IP6
		}
		p.Keys, p.KeysEx, p.Sel.NKeys = []nl.TcPeditKey{key}, []nl.TcPeditKeyEx{ex}, 1
	}
	return p
}
