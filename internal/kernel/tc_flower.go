package kernel

import (
	"encoding/binary"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// FlowerFilter is one tc flower filter on a clsact ingress, with the keys
// and actions the gateway's hardware tier uses. vishvananda/netlink's
// Flower lacks the TTL key, the fragment flag, pedit TTL/hop-limit and
// police-by-MTU, and sends one request per round trip; this encoder feeds
// FlowerSocket, which pipelines them.
type FlowerFilter struct {
	Ifindex int
	Chain   uint32
	Pref    uint16
	Handle  uint32
	SkipSW  bool // hardware only: the production setting
	SkipHW  bool // software only: labs (config flower-test-skip-hw)
	IPv6    bool
	VLANID  uint16           // match this 802.1Q tag (0: untagged)
	DstMAC  net.HardwareAddr // match this destination MAC (nil: any)
	// Selector; a zero prefix is not matched.
	Src, Dst         netip.Prefix
	IPProto          uint8
	SPort, SPortMask uint16
	DPort, DPortMask uint16
	// TTL / hop limit under TTLMask (TTLMask 0: not matched).
	TTL, TTLMask uint8
	NoFrag       bool
	Actions      []FlowerAction
	anyProto     bool // delete whatever the protocol (ETH_P_ALL 0)
}

// FlowerAction is one action of a filter, in order.
type FlowerAction struct {
	Kind     FlowerActionKind
	VLANID   uint16           // ActVLANPush
	MTU      uint32           // ActPoliceMTU
	Ifindex  int              // ActRedirect
	DstMAC   net.HardwareAddr // ActSetMACs
	SrcMAC   net.HardwareAddr
	Hoplimit bool // ActDecTTL: IPv6 hop limit instead of IPv4 TTL
}

// FlowerActionKind names the actions.
type FlowerActionKind uint8

const (
	ActPass      FlowerActionKind = iota // gact ok: hand the packet to the host
	ActPoliceMTU                         // police mtu N: larger packets to the host, the rest on
	ActVLANPop
	ActVLANPush
	ActDecTTL  // pedit ex add 0xff to the TTL / hop limit
	ActSetMACs // pedit ex set eth dst, src
	ActCsumIP  // csum ip header
	ActRedirect
)

const (
	tcActOK     = 0
	tcActPipe   = 3
	tcActStolen = 4
	// clsact ingress: TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS).
	clsactIngress = 0xFFFFFFF2
	ethPIP        = 0x0800
	ethPIPv6      = 0x86DD
	ethP8021Q     = 0x8100
	flowDisIsFrag = 1 // TCA_FLOWER_KEY_FLAGS_IS_FRAGMENT
)

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func (f *FlowerFilter) ethType() uint16 {
	if f.IPv6 {
		return ethPIPv6
	}
	return ethPIP
}

// Protocol is the filter's protocol (tcm_info's low half).
func (f *FlowerFilter) Protocol() uint16 {
	if f.anyProto {
		return 0
	}
	if f.VLANID != 0 {
		return ethP8021Q
	}
	return f.ethType()
}

// request builds RTM_NEWTFILTER (or RTM_DELTFILTER with del).
func (f *FlowerFilter) request(del bool) *nl.NetlinkRequest {
	proto, flags := unix.RTM_NEWTFILTER, unix.NLM_F_CREATE|unix.NLM_F_EXCL
	if del {
		proto, flags = unix.RTM_DELTFILTER, 0
	}
	req := nl.NewNetlinkRequest(proto, flags|unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(f.Ifindex), Handle: f.Handle, Parent: clsactIngress,
		Info: uint32(f.Pref)<<16 | uint32(htons(f.Protocol()))})
	req.AddData(nl.NewRtAttr(nl.TCA_CHAIN, nl.Uint32Attr(f.Chain)))
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("flower")))
	if del {
		return req
	}
	opts := nl.NewRtAttr(nl.TCA_OPTIONS, nil)
	var clsFlags uint32
	if f.SkipSW {
		clsFlags |= nl.TCA_CLS_FLAGS_SKIP_SW
	}
	if f.SkipHW {
		clsFlags |= nl.TCA_CLS_FLAGS_SKIP_HW
	}
	opts.AddRtAttr(nl.TCA_FLOWER_FLAGS, nl.Uint32Attr(clsFlags))
	if f.VLANID != 0 {
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_ETH_TYPE, be16(ethP8021Q))
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_VLAN_ID, nl.Uint16Attr(f.VLANID))
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_VLAN_ETH_TYPE, be16(f.ethType()))
	} else {
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_ETH_TYPE, be16(f.ethType()))
	}
	if f.DstMAC != nil {
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_ETH_DST, []byte(f.DstMAC))
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_ETH_DST_MASK, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	}
	if f.IPProto != 0 {
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_IP_PROTO, []byte{f.IPProto})
	}
	addPrefix := func(p netip.Prefix, k4, m4, k6, m6 int) {
		if !p.IsValid() || p.Bits() == 0 {
			return
		}
		a := p.Masked().Addr()
		bits := 32
		k, m := k4, m4
		if f.IPv6 {
			bits, k, m = 128, k6, m6
		}
		opts.AddRtAttr(k, a.AsSlice())
		opts.AddRtAttr(m, net.CIDRMask(p.Bits(), bits))
	}
	addPrefix(f.Src, nl.TCA_FLOWER_KEY_IPV4_SRC, nl.TCA_FLOWER_KEY_IPV4_SRC_MASK, nl.TCA_FLOWER_KEY_IPV6_SRC, nl.TCA_FLOWER_KEY_IPV6_SRC_MASK)
	addPrefix(f.Dst, nl.TCA_FLOWER_KEY_IPV4_DST, nl.TCA_FLOWER_KEY_IPV4_DST_MASK, nl.TCA_FLOWER_KEY_IPV6_DST, nl.TCA_FLOWER_KEY_IPV6_DST_MASK)
	if f.SPortMask|f.DPortMask != 0 {
		sk, sm, dk, dm := nl.TCA_FLOWER_KEY_TCP_SRC, nl.TCA_FLOWER_KEY_TCP_SRC_MASK, nl.TCA_FLOWER_KEY_TCP_DST, nl.TCA_FLOWER_KEY_TCP_DST_MASK
		switch f.IPProto {
		case unix.IPPROTO_UDP:
			sk, sm, dk, dm = nl.TCA_FLOWER_KEY_UDP_SRC, nl.TCA_FLOWER_KEY_UDP_SRC_MASK, nl.TCA_FLOWER_KEY_UDP_DST, nl.TCA_FLOWER_KEY_UDP_DST_MASK
		case unix.IPPROTO_SCTP:
			sk, sm, dk, dm = nl.TCA_FLOWER_KEY_SCTP_SRC, nl.TCA_FLOWER_KEY_SCTP_SRC_MASK, nl.TCA_FLOWER_KEY_SCTP_DST, nl.TCA_FLOWER_KEY_SCTP_DST_MASK
		}
		if f.SPortMask != 0 {
			opts.AddRtAttr(sk, be16(f.SPort))
			opts.AddRtAttr(sm, be16(f.SPortMask))
		}
		if f.DPortMask != 0 {
			opts.AddRtAttr(dk, be16(f.DPort))
			opts.AddRtAttr(dm, be16(f.DPortMask))
		}
	}
	if f.TTLMask != 0 {
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_IP_TTL, []byte{f.TTL})
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_IP_TTL_MASK, []byte{f.TTLMask})
	}
	if f.NoFrag {
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_FLAGS, be32(0))
		opts.AddRtAttr(nl.TCA_FLOWER_KEY_FLAGS_MASK, be32(flowDisIsFrag))
	}
	acts := opts.AddRtAttr(nl.TCA_FLOWER_ACT, nil)
	for i, a := range f.Actions {
		a.encode(acts.AddRtAttr(i+1, nil))
	}
	req.AddData(opts)
	return req
}

func (a *FlowerAction) encode(at *nl.RtAttr) {
	gen := func(action int32) nl.TcGen { return nl.TcGen{Action: action} }
	switch a.Kind {
	case ActPass:
		at.AddRtAttr(nl.TCA_ACT_KIND, nl.ZeroTerminated("gact"))
		g := gen(tcActOK)
		at.AddRtAttr(nl.TCA_ACT_OPTIONS, nil).AddRtAttr(nl.TCA_GACT_PARMS, g.Serialize())
	case ActPoliceMTU:
		at.AddRtAttr(nl.TCA_ACT_KIND, nl.ZeroTerminated("police"))
		o := at.AddRtAttr(nl.TCA_ACT_OPTIONS, nil)
		// Over the MTU: TC_ACT_OK ends classification, the packet goes to
		// the host (the kernel sends ICMP / packet too big). Within it:
		// pipe to the next action.
		p := nl.TcPolice{Action: tcActOK, Mtu: a.MTU}
		o.AddRtAttr(nl.TCA_POLICE_TBF, p.Serialize())
		o.AddRtAttr(nl.TCA_POLICE_RESULT, nl.Uint32Attr(tcActPipe))
	case ActVLANPop, ActVLANPush:
		at.AddRtAttr(nl.TCA_ACT_KIND, nl.ZeroTerminated("vlan"))
		o := at.AddRtAttr(nl.TCA_ACT_OPTIONS, nil)
		v := nl.TcVlan{TcGen: gen(tcActPipe), Action: 1}
		if a.Kind == ActVLANPush {
			v.Action = 2
		}
		o.AddRtAttr(nl.TCA_VLAN_PARMS, v.Serialize())
		if a.Kind == ActVLANPush {
			o.AddRtAttr(nl.TCA_VLAN_PUSH_VLAN_ID, nl.Uint16Attr(a.VLANID))
			o.AddRtAttr(nl.TCA_VLAN_PUSH_VLAN_PROTOCOL, be16(ethP8021Q))
		}
	case ActDecTTL, ActSetMACs:
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
		p.Encode(at)
	case ActCsumIP:
		at.AddRtAttr(nl.TCA_ACT_KIND, nl.ZeroTerminated("csum"))
		c := nl.TcCsum{TcGen: gen(tcActPipe), UpdateFlags: 1} // TCA_CSUM_UPDATE_FLAG_IPV4HDR
		at.AddRtAttr(nl.TCA_ACT_OPTIONS, nil).AddRtAttr(nl.TCA_CSUM_PARMS, c.Serialize())
	case ActRedirect:
		at.AddRtAttr(nl.TCA_ACT_KIND, nl.ZeroTerminated("mirred"))
		m := nl.TcMirred{TcGen: gen(tcActStolen), Eaction: 1, Ifindex: uint32(a.Ifindex)} // TCA_EGRESS_REDIR
		at.AddRtAttr(nl.TCA_ACT_OPTIONS, nil).AddRtAttr(nl.TCA_MIRRED_PARMS, m.Serialize())
	}
}
