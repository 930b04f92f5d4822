// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"net/netip"
	"path/filepath"

	"sluice/internal/fileread"
)

// Host is host.yaml: one host's encrypted overlay (`sluice plan|apply|
// verify|teardown -f host.yaml`). The schema and one full example per
// source (docs/sources.md) are in docs/overlay.md.
type Host struct {
	// File is the name the configuration was read from (for messages).
	File string
	// Name identifies this overlay on the host (its apply journal); default
	// the file's base name without extension.
	Name string
	// Uplinks are the physical ports, optionally bonded.
	Uplinks *Uplinks
	// SRIOV configures the VFs of physical functions.
	SRIOV []SRIOV
	// VTEPs are the VXLAN/Geneve tunnel endpoints.
	VTEPs []VTEP
	// IPsec holds the SAs and policies protecting the VTEP traffic.
	IPsec *IPsec
	// GuestNetworks and Guests take the overlay to virtual machines
	// (host_guests.go).
	GuestNetworks []GuestNetwork
	Guests        []Guest
}

// Uplinks are the ports that carry the underlay.
type Uplinks struct {
	// Ports are netdev names or PCI addresses (0000:03:00.0), resolved at
	// plan time.
	Ports []string
	// MTU of the ports and the bond (0: leave as it is).
	MTU int
	// Bond, when set, bonds the ports in active-backup mode.
	Bond *Bond
	// Addresses go on the bond (or on the single port without a bond).
	Addresses []netip.Prefix
	Line      int
}

// BondModeActiveBackup is the only bond mode sluice sets up: the kernel's
// bonding driver offloads ESP (xfrmdev_ops) only in active-backup mode,
// where one port at a time carries all SAs; with LACP/balance modes each
// flow may leave through a different port and the SA state (sequence
// numbers, keys in the NIC) cannot follow it.
const BondModeActiveBackup = "active-backup"

// Bond is an active-backup bond over the uplinks.
type Bond struct {
	Name string
	Mode string // always BondModeActiveBackup
	// MIIMon is the link monitoring interval in ms (default 100).
	MIIMon int
	// Primary is the port preferred as active ("" : none).
	Primary string
	Line    int
}

// SRIOV configures one physical function.
type SRIOV struct {
	// PF is a netdev name or PCI address.
	PF string
	// VFs is the number of VFs (nil: leave as it is).
	VFs *int
	// Eswitch is legacy or switchdev ("" : leave as it is).
	Eswitch string
	// FlowSteering is mlx5's flow_steering_mode devlink parameter: dmfs or
	// smfs ("" : leave as it is).
	FlowSteering string
	// VFIPsec is ixgbe's vf-ipsec private flag (nil: leave as it is).
	VFIPsec *bool
	// VF holds per-VF settings.
	VF   []VFConfig
	Line int
}

// VFConfig is one VF's settings; nil/empty fields are left as they are.
type VFConfig struct {
	Index    int
	MAC      string // lower case, colon separated
	VLAN     *int
	Trust    *bool
	SpoofChk *bool
	// IPsec lists the mlx5 devlink port function capabilities to enable:
	// "crypto" (ipsec_crypto) and/or "packet" (ipsec_packet).
	IPsec []string
	Line  int
}

// VTEP types.
const (
	VTEPVXLAN  = "vxlan"
	VTEPGeneve = "geneve"
)

// VTEP is one tunnel endpoint device.
type VTEP struct {
	Name string
	Type string // VTEPVXLAN or VTEPGeneve
	VNI  uint32
	// Local is placed on lo as a /32 (/128) and used as the source.
	Local netip.Addr
	// Port is the UDP destination port (default 4789 / 6081).
	Port    uint16
	Remotes []Remote
	// MTU of the VTEP device (0: the largest that fits the uplinks).
	MTU int
	// GeneveOptions is the option bytes per packet to budget for.
	GeneveOptions int
	// Addresses are overlay addresses on the VTEP device.
	Addresses []netip.Prefix
	Line      int
}

// Remote is a remote VTEP and the route to it.
type Remote struct {
	Address netip.Addr
	// Via is the next hop of the /32 (/128) route to Address (invalid:
	// no route: the address is reachable already).
	Via  netip.Addr
	Line int
}

// IPsec modes and offloads.
const (
	ModeTransport = "transport"
	ModeTunnel    = "tunnel"

	OffloadModeNone   = "none"
	OffloadModeCrypto = "crypto"
	OffloadModePacket = "packet"
	OffloadModeAuto   = "auto"
)

// IPsec is the manually keyed ESP between this host and its peers.
type IPsec struct {
	// Keys is the key file (absolute, or relative to the host file).
	Keys     string
	KeysLine int
	Peers    []Peer
	// UnsafeBondOffload allows offload through a bond on kernels where
	// sluice knows it to be broken (see docs/overlay.md).
	UnsafeBondOffload bool
	// Keying is the default of the peers' keying: KeyingManual or
	// KeyingIKE (host_keying.go).
	Keying string
	// IKE configures strongSwan for the peers keyed by IKE.
	IKE *IKE
}

// Peer is a pair of SAs (out and in) and their policies.
type Peer struct {
	// Name names the peer in the key file.
	Name          string
	Local, Remote netip.Addr
	Mode          string // ModeTransport or ModeTunnel
	// KeyBits is 128 or 256 (rfc4106(gcm(aes)), 128-bit ICV).
	KeyBits           int
	SPIOut, SPIIn     uint32
	ReqidOut, ReqidIn uint32
	ESN               bool
	// ESNByOffload is true when ESN is on because the peer asks for
	// packet offload and the file does not set esn (the default).
	ESNByOffload bool
	ReplayWindow int
	// Offload is none, crypto, packet or auto: the shorthand for both
	// directions. OffloadOut and OffloadIn are what each SA gets (from
	// offload-out/offload-in, else Offload): the ixgbevf VF-offload patches's ixgbevf offloads
	// inbound SAs only, so "offload-in: crypto, offload-out: none" is
	// that hardware's setting.
	Offload    string
	OffloadOut string
	OffloadIn  string
	OffloadDev string
	// Selectors are the tunnel-mode traffic selectors (default: Local/32
	// to Remote/32).
	Selectors []Selector
	Priority  uint32
	// Keying is KeyingManual (SPIs and keys from the file) or KeyingIKE.
	Keying string
	// LocalID and RemoteID are the IKE identities (default: the
	// addresses; with certificates, a subjectAltName of the certificate).
	LocalID, RemoteID string
	// AcceptLeaks names driver behaviours (internal/driverquirk, such as
	// exact-selector-match) that leak cleartext with this peer's layout
	// and that the user accepts: plan refuses such a layout otherwise.
	AcceptLeaks []string
	Line        int
}

// OffloadFor is the offload mode of the SA in direction dir ("out" or
// "in").
func (pr *Peer) OffloadFor(dir string) string {
	if dir == "in" {
		return pr.OffloadIn
	}
	return pr.OffloadOut
}

// Offloads reports whether either SA asks for offload.
func (pr *Peer) Offloads() bool {
	return pr.OffloadOut != OffloadModeNone || pr.OffloadIn != OffloadModeNone
}

// Selector is one tunnel-mode traffic selector pair.
type Selector struct {
	Local, Remote netip.Prefix
	Line          int
}

// Defaults.
const (
	DefaultVXLANPort    = 4789
	DefaultGenevePort   = 6081
	DefaultReplayWindow = 64
	// MaxLegacyReplay is the largest replay window without ESN (the
	// kernel's legacy replay state is a 32-bit bitmap).
	MaxLegacyReplay = 32
	// MaxESNReplay is the largest replay window sluice sets with ESN.
	MaxESNReplay = 4096
)

// KeysPath is the key file's path, relative paths taken from the host
// file's directory.
func (h *Host) KeysPath() string {
	if h.IPsec == nil || h.IPsec.Keys == "" {
		return ""
	}
	if filepath.IsAbs(h.IPsec.Keys) {
		return h.IPsec.Keys
	}
	return filepath.Join(filepath.Dir(h.File), h.IPsec.Keys)
}

// LoadHost reads and validates a host.yaml file.
func LoadHost(path string) (*Host, error) {
	data, err := fileread.Read(path, fileread.ConfigLimit)
	if err != nil {
		return nil, fmt.Errorf("host config: %w", err)
	}
	return ParseHost(data, path)
}

// ParseHost parses and validates the contents of a host.yaml; name is
// used in messages and for the default Name. Every problem found is
// returned in one *ValidationErrors.
func ParseHost(data []byte, name string) (*Host, error) {
	p := newParser(name, len(data))
	h := &Host{File: p.File}
	root := p.Read(data, "a host file needs at least one of uplinks:, sriov:, vteps: or ipsec: (see docs/overlay.md)", "uplinks: and vteps:", &hostFile{}, h)
	if root == nil {
		return nil, p.Result()
	}
	m := p.host(root, h)
	m.applyDefaults(p, h)
	m.validate(p, h)
	if err := p.Result(); err != nil {
		return nil, err
	}
	return h, nil
}
