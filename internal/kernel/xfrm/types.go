// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"net/netip"
	"strconv"
)

// Dir is an XFRM policy direction, numbered as the kernel numbers them
// (XFRM_POLICY_IN/OUT/FWD), so values can go into BPF maps unchanged.
type Dir uint8

const (
	DirIn  Dir = 0
	DirOut Dir = 1
	DirFwd Dir = 2
)

// dirMax is XFRM_POLICY_MAX: a per-socket policy (setsockopt
// IP_XFRM_POLICY, as IKE daemons set on their own sockets so their
// packets bypass IPsec) is dumped with XFRM_POLICY_MAX + its direction.
const dirMax = 3

// Socket reports a per-socket policy; the kernel applies it to one
// socket only, never to forwarded or other traffic.
func (d Dir) Socket() bool { return d >= dirMax && d < 2*dirMax }

func (d Dir) String() string {
	switch d {
	case DirIn:
		return "in"
	case DirOut:
		return "out"
	case DirFwd:
		return "fwd"
	}
	if d.Socket() {
		// iproute2 prints these as "socket in" / "socket out".
		return "socket " + (d - dirMax).String()
	}
	return "dir " + strconv.Itoa(int(d))
}

// Action is a policy's verdict for matching traffic.
type Action uint8

const (
	ActionAllow Action = 0 // XFRM_POLICY_ALLOW
	ActionBlock Action = 1 // XFRM_POLICY_BLOCK
)

// SA and template modes (XFRM_MODE_*) the fast path names.
const (
	ModeTransport uint8 = 0 // XFRM_MODE_TRANSPORT
	ModeTunnel    uint8 = 1 // XFRM_MODE_TUNNEL
	ModeBEET      uint8 = 4 // XFRM_MODE_BEET
	// ModeIPTFS is IP traffic flow security (RFC 9347, Linux 6.14): inner
	// packets aggregated and fragmented into fixed-size ESP payloads.
	ModeIPTFS uint8 = 5
)

// SADir is an SA's XFRMA_SA_DIR (Linux 6.10): which way the kernel lets it
// carry traffic. SADirAny means the attribute is absent (either way).
type SADir uint8

const (
	SADirAny SADir = 0
	SADirIn  SADir = 1 // XFRM_SA_DIR_IN
	SADirOut SADir = 2 // XFRM_SA_DIR_OUT
)

func (d SADir) String() string {
	switch d {
	case SADirAny:
		return "any"
	case SADirIn:
		return "in"
	case SADirOut:
		return "out"
	}
	return "dir " + strconv.Itoa(int(d))
}

// Offload flags of XFRMA_OFFLOAD_DEV (struct xfrm_user_offload.flags).
const (
	OffloadIPv6    uint8 = 1 // XFRM_OFFLOAD_IPV6
	OffloadInbound uint8 = 2 // XFRM_OFFLOAD_INBOUND
	OffloadPacket  uint8 = 4 // XFRM_OFFLOAD_PACKET
)

// Offload is the XFRMA_OFFLOAD_DEV attribute of an SA or policy: the device
// that does the work and how much of it (crypto only, or the whole packet).
type Offload struct {
	Ifindex int
	Flags   uint8
}

// Packet reports full packet offload (the NIC encapsulates/decapsulates).
func (o *Offload) Packet() bool { return o != nil && o.Flags&OffloadPacket != 0 }

// Inbound reports an offload for the receive direction.
func (o *Offload) Inbound() bool { return o != nil && o.Flags&OffloadInbound != 0 }

// Selector is struct xfrm_selector with addresses as prefixes (host bits
// cleared). Ports and masks are in host byte order; for ICMP/ICMPv6 SPort is
// the type and DPort the code, as the kernel's xfrm_flowi_sport/dport read
// them.
type Selector struct {
	Src, Dst                           netip.Prefix
	Proto                              uint8
	SPort, SPortMask, DPort, DPortMask uint16
	Ifindex                            int
}

// Tmpl is one template (struct xfrm_user_tmpl) of a policy: which SA the
// matching traffic must go through.
type Tmpl struct {
	Src, Dst netip.Addr // tunnel endpoints (unset in transport mode)
	Proto    uint8      // IPPROTO_ESP, _AH, _COMP
	Mode     uint8      // XFRM_MODE_TRANSPORT=0, TUNNEL=1, ...
	Reqid    uint32
	SPI      uint32
	Optional bool
}

// Policy is an XFRM policy as the kernel reports it.
type Policy struct {
	Index    uint32
	Dir      Dir
	Priority uint32
	Action   Action
	Sel      Selector
	Tmpls    []Tmpl
	Mark     uint32
	MarkMask uint32
	IfID     uint32
	Sub      bool // XFRM_POLICY_TYPE_SUB
	SecCtx   bool // carries a security context (SELinux labelled IPsec)
	// Unconfirmed: learnt from a notification (which never carries the
	// security context) and gone before the kernel could be asked for it;
	// whether it had a context is unknown.
	Unconfirmed bool
	Offload     *Offload
}

// State is an XFRM SA as the kernel reports it. Keys are not kept: the
// fast path never needs them, so they cannot leak from here.
type State struct {
	Src, Dst netip.Addr
	Proto    uint8
	SPI      uint32
	Reqid    uint32
	Mode     uint8
	Sel      Selector
	Offload  *Offload
	IfID     uint32
	Mark     uint32
	MarkMask uint32
	// Alg is what sizes the SA's packets; never key material.
	Alg StateAlg
	// Dir is XFRMA_SA_DIR (Linux 6.10); SADirAny without it.
	Dir SADir
	// PerCPU and CPU: XFRMA_SA_PCPU (Linux 6.13), an SA the kernel uses
	// for packets sent from CPU only; several such SAs share a template.
	PerCPU bool
	CPU    uint32
}

// StateAlg is an SA's transform and framing as far as its size on the
// wire goes (internal/mtu turns it into the SA's MTU).
type StateAlg struct {
	// AEAD and ICVBits: XFRMA_ALG_AEAD's name and ICV length.
	AEAD    string
	ICVBits int
	// Crypt, Auth and AuthTruncBits: XFRMA_ALG_CRYPT, XFRMA_ALG_AUTH(_TRUNC)
	// (AuthTruncBits 0: the kernel's default for Auth).
	Crypt         string
	Auth          string
	AuthTruncBits int
	// Encap is XFRMA_ENCAP's type (2: UDP_ENCAP_ESPINUDP, NAT-T), 0 without.
	Encap uint16
	// ESN: XFRM_STATE_ESN.
	ESN bool
}

// String prints the selector the way `ip xfrm policy` does.
func (s Selector) String() string {
	out := "src " + s.Src.String() + " dst " + s.Dst.String()
	if s.Proto != 0 {
		out += " proto " + protoName(s.Proto)
	}
	if s.SPortMask != 0 {
		out += " sport " + strconv.Itoa(int(s.SPort))
	}
	if s.DPortMask != 0 {
		out += " dport " + strconv.Itoa(int(s.DPort))
	}
	return out
}

func protoName(p uint8) string {
	switch p {
	case 1:
		return "icmp"
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 58:
		return "ipv6-icmp"
	case 132:
		return "sctp"
	case 136:
		return "udplite"
	}
	return strconv.Itoa(int(p))
}
