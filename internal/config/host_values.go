// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The leaf types of host.yaml's values (see yamlleaf.go and yamldoc for
// the shared ones): each checks its value and says how to fix it.

type (
	max1023   struct{ upTo }
	max1024   struct{ upTo }
	max4094   struct{ upTo }
	max4095   struct{ upTo }
	max4096   struct{ upTo }
	max8191   struct{ upTo }
	max16M    struct{ upTo }
	maxReplay struct{ upTo }
	maxU62    struct{ upTo }
)

func (max1023) Max() uint64   { return 1023 }
func (max1024) Max() uint64   { return 1024 }
func (max4094) Max() uint64   { return 4094 }
func (max4095) Max() uint64   { return 4095 }
func (max4096) Max() uint64   { return 4096 }
func (max8191) Max() uint64   { return 8191 }
func (max16M) Max() uint64    { return 1 << 24 }
func (maxReplay) Max() uint64 { return MaxESNReplay }
func (maxU62) Max() uint64    { return 1 << 62 }

// The host file's enums, each one of its values; the default, where
// there is one, is marked in messages (oneOf).
type (
	eswitchMode    string
	steeringMode   string
	vfCap          string
	vtepType       string
	keyingMode     string
	ipsecMode      string
	offloadSetting string // offload: (default none)
	offloadDir     string // offload-out, offload-in (default: offload)
	bridgeType     string
	attachMode     string
)

func (v *eswitchMode) UnmarshalYAML(n *yaml.Node) error {
	return oneOf(n, v, "legacy", "switchdev")
}
func (v *steeringMode) UnmarshalYAML(n *yaml.Node) error { return oneOf(n, v, "dmfs", "smfs") }
func (v *vfCap) UnmarshalYAML(n *yaml.Node) error        { return oneOf(n, v, "crypto", "packet") }
func (v *vtepType) UnmarshalYAML(n *yaml.Node) error {
	return oneOf(n, v, VTEPVXLAN, VTEPGeneve)
}
func (v *keyingMode) UnmarshalYAML(n *yaml.Node) error {
	return oneOf(n, v, KeyingManual, KeyingIKE)
}
func (v *ipsecMode) UnmarshalYAML(n *yaml.Node) error {
	return oneOf(n, v, ModeTransport, ModeTunnel)
}
func (v *offloadSetting) UnmarshalYAML(n *yaml.Node) error {
	return oneOf(n, v, OffloadModeNone, OffloadModeCrypto, OffloadModePacket, OffloadModeAuto)
}
func (v *offloadDir) UnmarshalYAML(n *yaml.Node) error {
	return oneOf(n, v, OffloadModeNone, OffloadModeCrypto, OffloadModePacket, OffloadModeAuto)
}
func (v *bridgeType) UnmarshalYAML(n *yaml.Node) error {
	return oneOf(n, v, BridgeOVS, BridgeLinux)
}
func (v *attachMode) UnmarshalYAML(n *yaml.Node) error {
	return oneOf(n, v, AttachVFPassthrough, AttachRepresentor, AttachVirtio)
}

// nameRE is what host, peer and guest names may be: usable in file
// names, key files and 15-byte bridge names (libvirt accepts more).
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// usableName names the host, a guest network or a guest.
type usableName = str[nameRule]

type nameRule struct{}

func (nameRule) Want() string { return "a name such as node-a or vm1" }
func (nameRule) Check(s string) (string, string) {
	if !nameRE.MatchString(s) {
		return "", show(s) + " is not a usable name; use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"
	}
	return s, ""
}

// peerName names a peer, here and in the key file.
type peerName = str[peerNameRule]

type peerNameRule struct{}

func (peerNameRule) Want() string { return "a peer name such as node-b" }
func (peerNameRule) Check(s string) (string, string) {
	if !nameRE.MatchString(s) {
		return "", show(s) + " cannot name a peer in the key file; use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"
	}
	return s, ""
}

var pciRE = regexp.MustCompile(`^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)

// IsPCIAddress reports whether s is written as a PCI address (0000:03:00.0
// or 03:00.0) rather than a netdev name.
func IsPCIAddress(s string) bool { return pciRE.MatchString(s) }

// portName is a netdev name or a PCI address (normalised to 0000:bb:dd.f,
// lower case).
type portName = str[portRule]

type portRule struct{}

func (portRule) Want() string {
	return "a netdev name such as enp3s0f0np0 or a PCI address such as 0000:03:00.0"
}
func (portRule) Check(s string) (string, string) {
	if IsPCIAddress(s) {
		s = strings.ToLower(s)
		if strings.Count(s, ":") == 1 {
			s = "0000:" + s
		}
		return s, ""
	}
	if problem := ifnameProblem(s); problem != "" {
		return "", problem + " (or write a PCI address such as 0000:03:00.0)"
	}
	return s, ""
}

// mtu is an interface MTU, 68 to 65535.
type mtu = num[mtuRule]

type mtuRule struct{}

func (mtuRule) Max() uint64 { return 65535 }
func (mtuRule) Refuse(v uint64) string {
	if v < 68 {
		return fmt.Sprintf("%d is below 68, the smallest MTU IPv4 allows; use 68 to 65535 (1500 and 9000 are usual)", v)
	}
	return ""
}

// bondMode is a bond's mode: active-backup only.
type bondMode = str[bondModeRule]

type bondModeRule struct{}

func (bondModeRule) Want() string { return BondModeActiveBackup }
func (bondModeRule) Check(s string) (string, string) {
	if s != BondModeActiveBackup {
		return "", show(s) + " is not supported; sluice bonds in active-backup mode only: the kernel offloads ESP to a bond (xfrmdev_ops) only in active-backup mode, where one port at a time holds every SA; in 802.3ad/balance modes flows spread over ports whose NICs do not share SA state, so offload is refused (the ConnectX-6 SR-IOV guide). Write mode: active-backup"
	}
	return s, ""
}

// miimon is a bond's link monitoring period in ms.
type miimon = num[miimonRule]

type miimonRule struct{}

func (miimonRule) Max() uint64 { return 60000 }
func (miimonRule) Refuse(v uint64) string {
	if v == 0 {
		return "0 turns link monitoring off, and then the bond never fails over; use a period in ms such as 100"
	}
	return ""
}

// ifAddr is an interface address with its prefix length (host bits
// kept).
type ifAddr netip.Prefix

func (v *ifAddr) UnmarshalYAML(n *yaml.Node) error {
	s, err := scalar(n, "an address with its prefix length such as 192.168.70.2/24")
	if err != nil {
		return err
	}
	p, perr := netip.ParsePrefix(s)
	switch {
	case perr != nil && !strings.Contains(s, "/"):
		return leafErr(n, "%s has no prefix length; write the address with its subnet such as 192.168.70.2/24", show(s))
	case perr != nil:
		return leafErr(n, "%s is not an address with a prefix length; write one such as 192.168.70.2/24 or 2001:db8::2/64", show(s))
	case p.Addr().Zone() != "":
		return leafErr(n, "%s has an IPv6 zone; remove it", show(s))
	case p.Addr().IsUnspecified() || p.Addr().IsMulticast():
		return leafErr(n, "%s cannot be an interface address; write a unicast address", show(s))
	case p.Addr().Is4In6():
		return leafErr(n, "%s", mappedMsg(s, p.Addr()))
	}
	*v = ifAddr(p)
	return nil
}

// mac is a unicast Ethernet MAC address (lower case, colon separated).
type mac = str[macRule]

type macRule struct{}

func (macRule) Want() string { return "a MAC address such as 02:00:00:00:00:01" }
func (macRule) Check(s string) (string, string) {
	hw, err := net.ParseMAC(s)
	switch {
	case err != nil || len(hw) != 6:
		return "", show(s) + " is not an Ethernet MAC address; write one such as 02:00:00:00:00:01"
	case hw[0]&1 != 0:
		return "", s + " is a multicast address; a VF needs a unicast MAC (first byte even, such as 02:...)"
	case hw.String() == "00:00:00:00:00:00":
		return "", "00:00:00:00:00:00 is not a usable MAC; write a locally administered one such as 02:00:00:00:00:01"
	}
	return hw.String(), ""
}

// vni is a VXLAN/Geneve network identifier, 1 to 2^24-1.
type vni = num[vniRule]

type vniRule struct{}

func (vniRule) Max() uint64 { return 1<<24 - 1 }
func (vniRule) Refuse(v uint64) string {
	if v == 0 {
		return "VNI 0 is reserved; use 1 to 16777215"
	}
	return ""
}

// geneveOptions is the Geneve option length in bytes (4-byte words).
type geneveOptions = num[geneveRule]

type geneveRule struct{}

func (geneveRule) Max() uint64 { return 252 }
func (geneveRule) Refuse(v uint64) string {
	if v%4 != 0 {
		return fmt.Sprintf("%d is not a multiple of 4; Geneve options come in 4-byte words", v)
	}
	return ""
}

// keyFile is ipsec.keys: the path of the key file.
type keyFile = str[keyFileRule]

type keyFileRule struct{}

func (keyFileRule) Want() string { return "the path of the key file" }
func (keyFileRule) Check(s string) (string, string) {
	if s == "" {
		return "", "is empty; write the path of the key file (mode 0600), such as /etc/sluice/node-a.keys"
	}
	return s, ""
}

// keyBits is the AES key size of rfc4106(gcm(aes)).
type keyBits = num[keyBitsRule]

type keyBitsRule struct{}

func (keyBitsRule) Max() uint64 { return 1024 }
func (keyBitsRule) Refuse(v uint64) string {
	if v != 128 && v != 256 {
		return fmt.Sprintf("%d: rfc4106(gcm(aes)) takes 128- or 256-bit AES keys; write 128 or 256", v)
	}
	return ""
}

// spi is an SPI; 1-255 are reserved by IANA (RFC 4303 2.1) and 0 cannot
// be used.
type spi = num[spiRule]

type spiRule struct{}

func (spiRule) Max() uint64 { return 1<<32 - 1 }
func (spiRule) Refuse(v uint64) string {
	if v < 256 {
		return fmt.Sprintf("SPI %d is reserved (0-255, RFC 4303); use a value from 256 (0x100) to 4294967295, such as 0x1001", v)
	}
	return ""
}

// reqid ties a policy template to its SAs; a template with reqid 0 takes
// any SA between the addresses.
type reqid = num[reqidRule]

type reqidRule struct{}

func (reqidRule) Max() uint64 { return 1<<32 - 1 }
func (reqidRule) Refuse(v uint64) string {
	if v == 0 {
		return "0 means no reqid to the kernel: the policy would take any SA between these addresses; give a non-zero reqid, or leave it out (default: the SPI)"
	}
	return ""
}

// lifetime is a duration with a unit (1h, 30m, 90s).
type lifetime time.Duration

func (v *lifetime) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!int" || n.ShortTag() == "!!float") {
		return leafErr(n, "%s has no unit; write a duration such as 1h, 30m or 90s", show(n.Value))
	}
	s, err := scalar(n, "a duration such as 1h")
	if err != nil {
		return err
	}
	d, perr := time.ParseDuration(s)
	if perr != nil || d < 0 {
		return leafErr(n, "%q is not a duration; write one such as 1h, 30m or 90s", s)
	}
	*v = lifetime(d)
	return nil
}
