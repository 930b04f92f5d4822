// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"sluice/internal/fileread"
)

// Gateway is gateway.yaml: the configuration of `sluice gateway run`, the
// XDP fast path that mirrors the kernel's XFRM policies and forwards
// packet-offloaded traffic.
type Gateway struct {
	// File is the name the configuration was read from (for messages).
	File string
	// Lab allows policy-source: static. Production gateways leave it false.
	Lab bool
	// PolicySource says where the fast path's policies come from: the
	// kernel's XFRM policies (default) or Policies below (labs only).
	PolicySource PolicySource
	// Counters enables per-policy packet and byte counters (default true).
	Counters bool
	// PinDir is the bpffs directory for pinned maps and links
	// (default DefaultPinDir).
	PinDir string
	// Lease is how long the fast path keeps forwarding without hearing
	// from the daemon; after that it passes everything to the kernel.
	// Default DefaultLease, between MinLease and MaxLease.
	Lease time.Duration
	// APISocket is the daemon's API socket ("" : no API; default
	// DefaultAPISocket). APIOwner and APIGroup, when set, own it (mode
	// 0660: the owner and the group's members may use it).
	APISocket string
	APIOwner  string
	APIGroup  string
	// MetricsListen is the TCP address of the Prometheus endpoint (""
	// default: off). MetricsTopPolicies bounds the per-policy series
	// (default DefaultTopPolicies).
	MetricsListen      string
	MetricsTopPolicies int
	// FlowerTestSkipHW installs the flower tier's rules as software-only
	// (skip_hw) instead of hardware-only (skip_sw), so that a lab without
	// an offload NIC can check their actions on real packets. Allowed only
	// with Lab: in production a software rule would send cleartext out of
	// the offload device without the NIC's encryption.
	FlowerTestSkipHW bool
	// FlowerInboundChain is the tc chain the NIC runs on packets it has
	// decrypted (the post-decrypt chain; default DefaultFlowerInboundChain).
	FlowerInboundChain uint32
	// FlowerPromotePPS, when not 0, turns on placement: a tunnel moves into
	// the NIC after steady traffic at this rate or more, and back to XDP
	// below a tenth of it (docs/flower.md, "Placement"). 0 (default): every
	// eligible tunnel gets its rule, within each port's budget.
	FlowerPromotePPS int
	// AcceptLeaks names driver behaviours (internal/driverquirk) the
	// operator accepts on this gateway's offload devices. Only
	// no-tx-miss-rule changes anything here: the flower tier then puts
	// outbound rules on such a device, and the moment between an SA's
	// deletion and the rule's withdrawal may send cleartext
	// (docs/flower.md, "What the device would send in cleartext").
	AcceptLeaks []string
	// FlowerTestPlacementInterval, labs only, replaces placement's
	// DefaultPlacementInterval between counter readings (0: the default),
	// so that a test sees promotions and demotions in seconds.
	FlowerTestPlacementInterval time.Duration
	// KeyLines is the line of each top-level key as written, for the
	// checks that run later against the host (api-owner, api-group).
	KeyLines map[string]int
	// Daemon is how the daemon itself runs (daemon-cpu, daemon-priority,
	// lock-memory).
	Daemon DaemonSettings
	// Interfaces are the ports the fast path runs on; at least one.
	Interfaces []Interface
	// Policies are the static policies used with PolicySource static.
	Policies []StaticPolicy
}

// Interface is one port of the gateway, by Linux interface name (resolved
// by the daemon, not here).
type Interface struct {
	// Name is the Linux interface name, such as p0 or p0.502.
	Name string
	// L2 says who writes the Ethernet header of forwarded frames
	// (default L2NIC).
	L2 L2Mode
	// XDPMode is how the XDP program attaches (default XDPNative).
	XDPMode XDPMode
	// Inbound says what happens to traffic that matches IN/FWD policies
	// (default InboundPass: the kernel handles it). InboundForward is
	// allowed only with WANAntispoof AntispoofUpstream.
	Inbound InboundMode
	// WANAntispoof records what the operator asserts about the upstream
	// segment (default AntispoofNone: nothing).
	WANAntispoof Antispoof
	// HairpinToNexthop, when valid, is the next hop inbound-forwarded
	// traffic arriving on this interface is sent to, instead of the FIB's
	// choice (the daemon resolves its interface and MAC). Only with
	// InboundForward.
	HairpinToNexthop netip.Addr
	// Flower says which directions the hardware tier (tc flower skip_sw
	// rules, docs/flower.md) serves on this interface (default FlowerOff).
	// Outbound applies to a cleartext interface, inbound to the port that
	// receives ESP and needs Inbound == InboundForward.
	Flower FlowerMode
	// FlowerTTL makes flower rules decrement the TTL / hop limit and leave
	// packets with TTL <= 1 to the kernel, as a router must (default true).
	FlowerTTL bool
	// FlowerRuleBudget bounds the flower rules sluice keeps on this port's
	// device (default DefaultFlowerRuleBudget); tunnels beyond it stay on XDP.
	FlowerRuleBudget int
	// Line is the line of this entry in File.
	Line int
}

// FlowerMode is which directions the flower tier serves on an interface.
type FlowerMode string

const (
	FlowerOff      FlowerMode = "off"
	FlowerOutbound FlowerMode = "outbound"
	FlowerInbound  FlowerMode = "inbound"
	FlowerBoth     FlowerMode = "both"
)

// Outbound reports whether the mode serves outbound traffic.
func (m FlowerMode) Outbound() bool { return m == FlowerOutbound || m == FlowerBoth }

// Inbound reports whether the mode serves inbound traffic.
func (m FlowerMode) Inbound() bool { return m == FlowerInbound || m == FlowerBoth }

// StaticPolicy is an XFRM policy written in the file rather than read from
// the kernel (policy-source: static, labs and offline tests only).
type StaticPolicy struct {
	// Dir is the XFRM direction: in, out or fwd.
	Dir Direction
	// Src and Dst are the selector's prefixes; a bare address in the file
	// becomes a /32 or /128. Both have the same family.
	Src, Dst netip.Prefix
	// Proto is the selector's IP protocol; ProtoAny matches all.
	Proto Protocol
	// Sport and Dport are single ports (0: any); only with a protocol that
	// has ports (Protocol.HasPorts).
	Sport, Dport uint16
	// Priority orders overlapping policies; lower wins (default 0).
	Priority uint32
	// Action is ActionAllow (default) or ActionBlock.
	Action Action
	// Peer is the remote tunnel endpoint and Local ours, whatever the
	// direction: an out policy's template runs Local -> Peer, an in/fwd
	// policy's Peer -> Local. Set for allow policies, unset for block;
	// same family as Src and Dst.
	Peer, Local netip.Addr
	// Reqid is the template's reqid, tying the policy to its SAs
	// (default 0).
	Reqid uint32
	// Offload is OffloadNone (default) or OffloadPacket on OffloadDev,
	// which is the name of one of the gateway's interfaces.
	Offload    OffloadMode
	OffloadDev string
	// Optional marks the template optional (strongSwan's fwd-out
	// policies).
	Optional bool
	// Line is the line of this entry in File.
	Line int
}

// PolicySource is where the fast path's policies come from.
type PolicySource string

const (
	// PolicySourceKernel mirrors the kernel's XFRM policies.
	PolicySourceKernel PolicySource = "kernel"
	// PolicySourceStatic uses Gateway.Policies (requires Gateway.Lab).
	PolicySourceStatic PolicySource = "static"
)

// L2Mode says who writes the Ethernet header of forwarded frames.
type L2Mode string

const (
	// L2NIC leaves the header to the NIC (mlx5 tunnel-mode packet offload
	// rewrites it from the SA's neighbour).
	L2NIC L2Mode = "nic"
	// L2FIB writes MACs from bpf_fib_lookup.
	L2FIB L2Mode = "fib"
)

// XDPMode is how the XDP program is attached.
type XDPMode string

const (
	// XDPNative runs the program in the driver.
	XDPNative XDPMode = "native"
	// XDPGeneric runs it in the kernel's generic hook (slow; for drivers
	// without native XDP and for tests).
	XDPGeneric XDPMode = "generic"
)

// InboundMode is what the fast path does with traffic that matches IN or
// FWD policies.
type InboundMode string

const (
	// InboundPass hands it to the kernel, whose FWD policy check drops
	// spoofed cleartext.
	InboundPass InboundMode = "pass"
	// InboundForward forwards it in XDP; see docs/gateway-config.md,
	// "What inbound: forward trusts".
	InboundForward InboundMode = "forward"
)

// Antispoof is what the operator asserts about the upstream segment.
type Antispoof string

const (
	// AntispoofNone asserts nothing.
	AntispoofNone Antispoof = "none"
	// AntispoofUpstream asserts that the upstream segment drops cleartext
	// sourced from protected prefixes before it reaches the port.
	AntispoofUpstream Antispoof = "upstream"
)

// Direction is an XFRM policy direction.
type Direction string

const (
	DirIn  Direction = "in"
	DirOut Direction = "out"
	DirFwd Direction = "fwd"
)

// Action is a policy's verdict.
type Action string

const (
	ActionAllow Action = "allow"
	ActionBlock Action = "block"
)

// OffloadMode is a policy's offload.
type OffloadMode string

const (
	// OffloadNone: the kernel does the work.
	OffloadNone OffloadMode = "none"
	// OffloadPacket: full packet offload on the policy's OffloadDev.
	OffloadPacket OffloadMode = "packet"
)

// Protocol is an IP protocol number in a selector; ProtoAny (0) matches
// every protocol.
type Protocol uint8

const (
	ProtoAny     Protocol = 0
	ProtoICMP    Protocol = 1
	ProtoTCP     Protocol = 6
	ProtoUDP     Protocol = 17
	ProtoICMPv6  Protocol = 58
	ProtoSCTP    Protocol = 132
	ProtoUDPLite Protocol = 136
)

var protoNames = map[string]Protocol{
	"tcp": ProtoTCP, "udp": ProtoUDP, "icmp": ProtoICMP, "icmpv6": ProtoICMPv6,
	"sctp": ProtoSCTP, "udplite": ProtoUDPLite,
}

// String returns the protocol's name as written in the file, its number
// when it has no name, or "any".
func (p Protocol) String() string {
	if p == ProtoAny {
		return "any"
	}
	for n, v := range protoNames {
		if v == p {
			return n
		}
	}
	return strconv.Itoa(int(p))
}

// HasPorts reports whether selectors on this protocol can carry ports.
func (p Protocol) HasPorts() bool {
	switch p {
	case ProtoTCP, ProtoUDP, ProtoSCTP, ProtoUDPLite:
		return true
	}
	return false
}

// Limits, and the defaults that are no key's (defaults.go has the others).
const (
	MaxFlowerChain      = 65535
	MaxFlowerRuleBudget = 1 << 20
	MinLease            = time.Second
	MaxLease            = 5 * time.Minute
	// DefaultPlacementInterval is how often placement reads the counters
	// (docs/flower.md, "Placement"); labs may shorten it within
	// MinPlacementInterval..MaxPlacementInterval.
	DefaultPlacementInterval = 2 * time.Second
	MinPlacementInterval     = 100 * time.Millisecond
	MaxPlacementInterval     = time.Minute
)

// LoadGateway reads and validates a gateway.yaml file.
func LoadGateway(path string) (*Gateway, error) {
	data, err := fileread.Read(path, fileread.ConfigLimit)
	if err != nil {
		return nil, fmt.Errorf("gateway config: %w", err)
	}
	return ParseGateway(data, path)
}

// ParseGateway parses and validates the contents of a gateway.yaml; name
// is used in messages. Defaults are applied after parsing. Every problem
// found is returned in one *ValidationErrors.
func ParseGateway(data []byte, name string) (*Gateway, error) {
	p := newParser(name, len(data))
	var f gatewayFile
	g := &Gateway{File: p.File, KeyLines: map[string]int{}}
	root := p.Read(data, "a gateway needs at least an interfaces: list (see docs/gateway-config.md)", "interfaces:", &f, g)
	if root == nil {
		return nil, p.Result()
	}
	meta := p.gateway(root, &f, g)
	meta.applyDefaults(g)
	meta.validate(p, g)
	if err := p.Result(); err != nil {
		return nil, err
	}
	return g, nil
}
