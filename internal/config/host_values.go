// SPDX-License-Identifier: Apache-2.0

package config

import (
	"net"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The leaf types of host.yaml's values (see yamlleaf.go for the shared
// ones): each checks its value and says how to fix it.

type (
	max1023   struct{}
	max1024   struct{}
	max4094   struct{}
	max4095   struct{}
	max4096   struct{}
	max8191   struct{}
	max16M    struct{}
	maxReplay struct{}
	maxU62    struct{}
)

func (max1023) max() uint64   { return 1023 }
func (max1024) max() uint64   { return 1024 }
func (max4094) max() uint64   { return 4094 }
func (max4095) max() uint64   { return 4095 }
func (max4096) max() uint64   { return 4096 }
func (max8191) max() uint64   { return 8191 }
func (max16M) max() uint64    { return 1 << 24 }
func (maxReplay) max() uint64 { return MaxESNReplay }
func (maxU62) max() uint64    { return 1 << 62 }

// chooser lists the values a choice allows; def, when not empty, is
// marked as the default in messages.
type chooser interface {
	choices() (def string, all []string)
}

// choice is one of C's values.
type choice[C chooser] string

func (v *choice[C]) UnmarshalYAML(n *yaml.Node) error {
	var c C
	def, all := c.choices()
	var s string
	err := oneOf(n, &s, def, all...)
	*v = choice[C](s)
	return err
}

type (
	eswitchChoice    struct{}
	steeringChoice   struct{}
	vfCapChoice      struct{}
	vtepTypeChoice   struct{}
	keyingChoice     struct{}
	modeChoice       struct{}
	offloadChoice    struct{}
	offloadDirChoice struct{}
	bridgeChoice     struct{}
	attachChoice     struct{}
)

var offloadModes = []string{OffloadModeNone, OffloadModeCrypto, OffloadModePacket, OffloadModeAuto}

func (eswitchChoice) choices() (string, []string)  { return "", []string{"legacy", "switchdev"} }
func (steeringChoice) choices() (string, []string) { return "", []string{"dmfs", "smfs"} }
func (vfCapChoice) choices() (string, []string)    { return "", []string{"crypto", "packet"} }
func (vtepTypeChoice) choices() (string, []string) { return VTEPVXLAN, []string{VTEPVXLAN, VTEPGeneve} }
func (keyingChoice) choices() (string, []string) {
	return KeyingManual, []string{KeyingManual, KeyingIKE}
}
func (modeChoice) choices() (string, []string) {
	return ModeTransport, []string{ModeTransport, ModeTunnel}
}
func (offloadChoice) choices() (string, []string)    { return OffloadModeNone, offloadModes }
func (offloadDirChoice) choices() (string, []string) { return "", offloadModes }
func (bridgeChoice) choices() (string, []string)     { return BridgeOVS, []string{BridgeOVS, BridgeLinux} }
func (attachChoice) choices() (string, []string) {
	return "", []string{AttachVFPassthrough, AttachRepresentor, AttachVirtio}
}

// nameRE is what host, peer and guest names may be: usable in file
// names, key files and 15-byte bridge names (libvirt accepts more).
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// hostName is the overlay host's name.
type hostName string

func (v *hostName) UnmarshalYAML(n *yaml.Node) error {
	s, err := scalar(n, "a name such as node-a")
	if err != nil {
		return err
	}
	if !nameRE.MatchString(s) {
		return leafErr(n, "%s is not a usable name; use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", show(s))
	}
	*v = hostName(s)
	return nil
}

// guestName names a guest network or a guest.
type guestName string

func (v *guestName) UnmarshalYAML(n *yaml.Node) error {
	s, err := scalar(n, "a name such as tenant-a or vm1")
	if err != nil {
		return err
	}
	if !nameRE.MatchString(s) {
		return leafErr(n, "%s is not a usable name; use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", show(s))
	}
	*v = guestName(s)
	return nil
}

// peerName names a peer, here and in the key file.
type peerName string

func (v *peerName) UnmarshalYAML(n *yaml.Node) error {
	s, err := scalar(n, "a peer name such as node-b")
	if err != nil {
		return err
	}
	if !nameRE.MatchString(s) {
		return leafErr(n, "%s cannot name a peer in the key file; use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", show(s))
	}
	*v = peerName(s)
	return nil
}

var pciRE = regexp.MustCompile(`^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)

// IsPCIAddress reports whether s is written as a PCI address (0000:03:00.0
// or 03:00.0) rather than a netdev name.
func IsPCIAddress(s string) bool { return pciRE.MatchString(s) }

// portName is a netdev name or a PCI address (normalised to 0000:bb:dd.f,
// lower case).
type portName string

func (portName) describe() (string, string) {
	return "port (a netdev name or PCI address)", "enp3s0f0np0"
}

func (v *portName) UnmarshalYAML(n *yaml.Node) error {
	s, err := scalar(n, "a netdev name such as enp3s0f0np0 or a PCI address such as 0000:03:00.0")
	if err != nil {
		return err
	}
	if IsPCIAddress(s) {
		s = strings.ToLower(s)
		if strings.Count(s, ":") == 1 {
			s = "0000:" + s
		}
		*v = portName(s)
		return nil
	}
	if problem := ifnameProblem(s); problem != "" {
		return leafErr(n, "%s (or write a PCI address such as 0000:03:00.0)", problem)
	}
	*v = portName(s)
	return nil
}

// mtu is an interface MTU, 68 to 65535.
type mtu int

func (v *mtu) UnmarshalYAML(n *yaml.Node) error {
	u, err := wholeNumber(n, 65535)
	if err != nil {
		return err
	}
	if u < 68 {
		return leafErr(n, "%d is below 68, the smallest MTU IPv4 allows; use 68 to 65535 (1500 and 9000 are usual)", u)
	}
	*v = mtu(u)
	return nil
}

// bondMode is a bond's mode: active-backup only.
type bondMode string

func (v *bondMode) UnmarshalYAML(n *yaml.Node) error {
	s, err := scalar(n, BondModeActiveBackup)
	if err != nil {
		return err
	}
	if s != BondModeActiveBackup {
		return leafErr(n, "%s is not supported; sluice bonds in active-backup mode only: the kernel offloads ESP to a bond (xfrmdev_ops) only in active-backup mode, where one port at a time holds every SA; in 802.3ad/balance modes flows spread over ports whose NICs do not share SA state, so offload is refused (the ConnectX-6 SR-IOV guide). Write mode: active-backup", show(s))
	}
	*v = bondMode(s)
	return nil
}

// miimon is a bond's link monitoring period in ms.
type miimon int

func (v *miimon) UnmarshalYAML(n *yaml.Node) error {
	u, err := wholeNumber(n, 60000)
	if err != nil {
		return err
	}
	if u == 0 {
		return leafErr(n, "0 turns link monitoring off, and then the bond never fails over; use a period in ms such as 100")
	}
	*v = miimon(u)
	return nil
}

// ifAddr is an interface address with its prefix length (host bits
// kept).
type ifAddr netip.Prefix

func (ifAddr) describe() (string, string) {
	return "address with its prefix length (such as 192.168.70.2/24)", "192.168.70.2/24"
}

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
type mac string

func (v *mac) UnmarshalYAML(n *yaml.Node) error {
	s, err := scalar(n, "a MAC address such as 02:00:00:00:00:01")
	if err != nil {
		return err
	}
	hw, perr := net.ParseMAC(s)
	switch {
	case perr != nil || len(hw) != 6:
		return leafErr(n, "%s is not an Ethernet MAC address; write one such as 02:00:00:00:00:01", show(s))
	case hw[0]&1 != 0:
		return leafErr(n, "%s is a multicast address; a VF needs a unicast MAC (first byte even, such as 02:...)", s)
	case hw.String() == "00:00:00:00:00:00":
		return leafErr(n, "00:00:00:00:00:00 is not a usable MAC; write a locally administered one such as 02:00:00:00:00:01")
	}
	*v = mac(hw.String())
	return nil
}

// vni is a VXLAN/Geneve network identifier, 1 to 2^24-1.
type vni uint32

func (v *vni) UnmarshalYAML(n *yaml.Node) error {
	u, err := wholeNumber(n, 1<<24-1)
	if err != nil {
		return err
	}
	if u == 0 {
		return leafErr(n, "VNI 0 is reserved; use 1 to 16777215")
	}
	*v = vni(u)
	return nil
}

// geneveOptions is the Geneve option length in bytes (4-byte words).
type geneveOptions int

func (v *geneveOptions) UnmarshalYAML(n *yaml.Node) error {
	u, err := wholeNumber(n, 252)
	if err != nil {
		return err
	}
	if u%4 != 0 {
		return leafErr(n, "%d is not a multiple of 4; Geneve options come in 4-byte words", u)
	}
	*v = geneveOptions(u)
	return nil
}

// keyFile is ipsec.keys: the path of the key file.
type keyFile string

func (v *keyFile) UnmarshalYAML(n *yaml.Node) error {
	s, err := scalar(n, "the path of the key file")
	if err != nil {
		return err
	}
	if s == "" {
		return leafErr(n, "is empty; write the path of the key file (mode 0600), such as /etc/sluice/node-a.keys")
	}
	*v = keyFile(s)
	return nil
}

// nonEmpty is a path or an identity: any single value but "".
type nonEmpty string

func (v *nonEmpty) UnmarshalYAML(n *yaml.Node) error {
	s, err := scalar(n, "a path or an identity")
	if err != nil {
		return err
	}
	if s == "" {
		return leafErr(n, "is empty; write a value, or remove the key")
	}
	*v = nonEmpty(s)
	return nil
}

// keyBits is the AES key size of rfc4106(gcm(aes)).
type keyBits int

func (v *keyBits) UnmarshalYAML(n *yaml.Node) error {
	u, err := wholeNumber(n, 1024)
	if err != nil {
		return err
	}
	if u != 128 && u != 256 {
		return leafErr(n, "%d: rfc4106(gcm(aes)) takes 128- or 256-bit AES keys; write 128 or 256", u)
	}
	*v = keyBits(u)
	return nil
}

// spi is an SPI; 1-255 are reserved by IANA (RFC 4303 2.1) and 0 cannot
// be used.
type spi uint32

func (v *spi) UnmarshalYAML(n *yaml.Node) error {
	u, err := wholeNumber(n, 1<<32-1)
	if err != nil {
		return err
	}
	if u < 256 {
		return leafErr(n, "SPI %d is reserved (0-255, RFC 4303); use a value from 256 (0x100) to 4294967295, such as 0x1001", u)
	}
	*v = spi(u)
	return nil
}

// reqid ties a policy template to its SAs; a template with reqid 0 takes
// any SA between the addresses.
type reqid uint32

func (v *reqid) UnmarshalYAML(n *yaml.Node) error {
	u, err := wholeNumber(n, 1<<32-1)
	if err != nil {
		return err
	}
	if u == 0 {
		return leafErr(n, "0 means no reqid to the kernel: the policy would take any SA between these addresses; give a non-zero reqid, or leave it out (default: the SPI)")
	}
	*v = reqid(u)
	return nil
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
