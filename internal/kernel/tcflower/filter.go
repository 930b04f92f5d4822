// SPDX-License-Identifier: Apache-2.0

package tcflower

import (
	"net"
	"net/netip"
)

// Filter is one tc flower filter on a clsact ingress, with the keys
// and actions the gateway's hardware tier uses. vishvananda/netlink's
// Flower lacks the TTL key, the fragment flag, pedit TTL/hop-limit and
// police-by-MTU, and sends one request per round trip; appendRequest
// (encode.go) encodes them for Socket, which batches them.
type Filter struct {
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
	Actions      []Action
	anyProto     bool // delete whatever the protocol (ETH_P_ALL 0)
}

// Action is one action of a filter, in order.
type Action struct {
	Kind     ActionKind
	VLANID   uint16           // ActVLANPush
	MTU      uint32           // ActPoliceMTU
	Ifindex  int              // ActRedirect
	DstMAC   net.HardwareAddr // ActSetMACs
	SrcMAC   net.HardwareAddr
	Hoplimit bool // ActDecTTL: IPv6 hop limit instead of IPv4 TTL
}

// ActionKind names the actions.
type ActionKind uint8

const (
	ActPass      ActionKind = iota // gact ok: hand the packet to the host
	ActPoliceMTU                   // police mtu N: larger packets to the host, the rest on
	ActVLANPop
	ActVLANPush
	ActDecTTL  // pedit ex add 0xff to the TTL / hop limit
	ActSetMACs // pedit ex set eth dst, src
	ActCsumIP  // csum ip header
	ActRedirect
	// ActPoliceUse: police pkts_rate 1 pkts_burst 1 conform-exceed
	// pipe/ok: one packet a second to the host, the rest on (appended,
	// so the kinds above keep their values).
	ActPoliceUse
)

// TCA_POLICE_PKTRATE64 and TCA_POLICE_PKTBURST64 (Linux 5.14), absent from nl.
const (
	tcaPolicePktRate64  = 10
	tcaPolicePktBurst64 = 11
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

func (f *Filter) ethType() uint16 {
	if f.IPv6 {
		return ethPIPv6
	}
	return ethPIP
}

// Protocol is the filter's protocol (tcm_info's low half).
func (f *Filter) Protocol() uint16 {
	if f.anyProto {
		return 0
	}
	if f.VLANID != 0 {
		return ethP8021Q
	}
	return f.ethType()
}
