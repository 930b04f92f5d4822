// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// hostMeta is where things are in the document, for validation.
type hostMeta struct {
	rootLine int
	uplinks  item
	bond     item
	ipsec    item
	sriov    []item
	vfs      [][]item
	vteps    []item
	remotes  [][]item
	peers    []item
	sels     [][]item
	// portItems etc. hold the line of each list element as written.
	portLines, addrLines []int
	guests               guestMeta
}

func (p *parser) host(root *yaml.Node) (*Host, *hostMeta) {
	h := &Host{File: p.file}
	m := &hostMeta{rootLine: root.Line}
	p.each(root, "", []key{
		{"name", func(f field) { h.Name = p.hostName(f) }},
		{"uplinks", func(f field) {
			if it, ok := p.mapping(f, "ports: [eth0, eth1]"); ok {
				m.uplinks = it
				h.Uplinks = p.uplinks(it, m)
			}
		}},
		{"sriov", func(f field) {
			for _, it := range p.mappings(f, "physical function", "pf: enp3s0f0np0") {
				s, vfs := p.sriov(it)
				h.SRIOV = append(h.SRIOV, s)
				m.sriov = append(m.sriov, it)
				m.vfs = append(m.vfs, vfs)
			}
		}},
		{"vteps", func(f field) {
			for _, it := range p.mappings(f, "VTEP", "name: vx0") {
				v, rs := p.vtep(it)
				h.VTEPs = append(h.VTEPs, v)
				m.vteps = append(m.vteps, it)
				m.remotes = append(m.remotes, rs)
			}
		}},
		{"ipsec", func(f field) {
			if it, ok := p.mapping(f, "keys: /etc/sluice/host.keys"); ok {
				m.ipsec = it
				h.IPsec = p.ipsec(it, m)
			}
		}},
		{"guest-networks", func(f field) { p.guestSections(f, h, &m.guests) }},
		{"guests", func(f field) { p.guestSections(f, h, &m.guests) }},
	})
	return h, m
}

// mapping accepts a single mapping as f's value.
func (p *parser) mapping(f field, example string) (item, bool) {
	if f.val.Kind != yaml.MappingNode {
		p.errorf(f.line, f.path, "want keys under %s (such as %s), got %s", f.name, example, kindName(f.val))
		return item{}, false
	}
	return item{path: f.path, line: f.line, node: f.val}, true
}

// scalars returns the elements of a list of scalars as fields; a single
// scalar is taken as a list of one.
func (p *parser) scalars(f field, what string) []field {
	if f.val.Kind == yaml.ScalarNode {
		return []field{f}
	}
	if f.val.Kind != yaml.SequenceNode {
		p.errorf(f.line, f.path, "want a list of %s, got %s", what, kindName(f.val))
		return nil
	}
	var out []field
	for i, c := range f.val.Content {
		if !p.spend(c.Line) {
			return out
		}
		n := deref(c)
		path := fmt.Sprintf("%s[%d]", f.path, i)
		if n.Kind != yaml.ScalarNode || isNull(n) {
			p.errorf(c.Line, path, "want %s, got %s", article(what), kindName(n))
			continue
		}
		out = append(out, field{name: f.name, path: path, line: c.Line, val: n})
	}
	return out
}

var hostNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func (p *parser) hostName(f field) string {
	s, ok := p.str(f, "a name such as node-a")
	if !ok {
		return ""
	}
	if !hostNameRE.MatchString(s) {
		p.errorf(f.line, f.path, "%s is not a usable name; use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", show(s))
		return ""
	}
	return s
}

func (p *parser) uplinks(it item, m *hostMeta) *Uplinks {
	u := &Uplinks{Line: it.line}
	p.each(it.node, it.path, []key{
		{"ports", func(f field) {
			for _, e := range p.scalars(f, "port (a netdev name or PCI address)") {
				u.Ports = append(u.Ports, p.portName(e))
				m.portLines = append(m.portLines, e.line)
			}
		}},
		{"mtu", func(f field) { u.MTU = p.mtu(f) }},
		{"bond", func(f field) {
			if bi, ok := p.mapping(f, "name: bond0"); ok {
				m.bond = bi
				u.Bond = p.bond(bi)
			}
		}},
		{"addresses", func(f field) {
			for _, e := range p.scalars(f, "address with its prefix length (such as 192.168.70.2/24)") {
				u.Addresses = append(u.Addresses, p.ifaddr(e))
				m.addrLines = append(m.addrLines, e.line)
			}
		}},
	})
	return u
}

var pciRE = regexp.MustCompile(`^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)

// IsPCIAddress reports whether s is written as a PCI address (0000:03:00.0
// or 03:00.0) rather than a netdev name.
func IsPCIAddress(s string) bool { return pciRE.MatchString(s) }

// portName accepts a netdev name or a PCI address (normalised to
// 0000:bb:dd.f, lower case).
func (p *parser) portName(f field) string {
	s, ok := p.str(f, "a netdev name such as enp3s0f0np0 or a PCI address such as 0000:03:00.0")
	if !ok {
		return ""
	}
	if IsPCIAddress(s) {
		s = strings.ToLower(s)
		if strings.Count(s, ":") == 1 {
			s = "0000:" + s
		}
		return s
	}
	if problem := ifnameProblem(s); problem != "" {
		p.errorf(f.line, f.path, "%s (or write a PCI address such as 0000:03:00.0)", problem)
		return ""
	}
	return s
}

func (p *parser) mtu(f field) int {
	v, ok := p.uint(f, 65535)
	if !ok {
		return 0
	}
	if v < 68 {
		p.errorf(f.line, f.path, "%d is below 68, the smallest MTU IPv4 allows; use 68 to 65535 (1500 and 9000 are usual)", v)
		return 0
	}
	return int(v)
}

func (p *parser) bond(it item) *Bond {
	b := &Bond{Line: it.line}
	p.each(it.node, it.path, []key{
		{"name", func(f field) { b.Name = p.ifname(f) }},
		{"mode", func(f field) {
			s, ok := p.str(f, BondModeActiveBackup)
			if !ok {
				return
			}
			if s != BondModeActiveBackup {
				p.errorf(f.line, f.path, "%s is not supported; sluice bonds in active-backup mode only: the kernel offloads ESP to a bond (xfrmdev_ops) only in active-backup mode, where one port at a time holds every SA; in 802.3ad/balance modes flows spread over ports whose NICs do not share SA state, so offload is refused (the ConnectX-6 SR-IOV guide). Write mode: active-backup", show(s))
				return
			}
			b.Mode = s
		}},
		{"miimon", func(f field) {
			v, ok := p.uint(f, 60000)
			if ok && v == 0 {
				p.errorf(f.line, f.path, "0 turns link monitoring off, and then the bond never fails over; use a period in ms such as 100")
				return
			}
			b.MIIMon = int(v)
		}},
		{"primary", func(f field) { b.Primary = p.portName(f) }},
	})
	return b
}

// ifaddr parses an interface address with its prefix length (host bits
// kept).
func (p *parser) ifaddr(f field) netip.Prefix {
	s, ok := p.str(f, "an address with its prefix length such as 192.168.70.2/24")
	if !ok {
		return netip.Prefix{}
	}
	v, err := netip.ParsePrefix(s)
	switch {
	case err != nil && !strings.Contains(s, "/"):
		p.errorf(f.line, f.path, "%s has no prefix length; write the address with its subnet such as 192.168.70.2/24", show(s))
	case err != nil:
		p.errorf(f.line, f.path, "%s is not an address with a prefix length; write one such as 192.168.70.2/24 or 2001:db8::2/64", show(s))
	case v.Addr().Zone() != "":
		p.errorf(f.line, f.path, "%s has an IPv6 zone; remove it", show(s))
	case v.Addr().IsUnspecified() || v.Addr().IsMulticast():
		p.errorf(f.line, f.path, "%s cannot be an interface address; write a unicast address", show(s))
	case v.Addr().Is4In6():
		p.errorf(f.line, f.path, "%s", mappedMsg(s, v.Addr()))
	default:
		return v
	}
	return netip.Prefix{}
}

func (p *parser) sriov(it item) (SRIOV, []item) {
	s := SRIOV{Line: it.line}
	var vfItems []item
	p.each(it.node, it.path, []key{
		{"pf", func(f field) { s.PF = p.portName(f) }},
		{"vfs", func(f field) {
			v, ok := p.uint(f, 4096)
			if ok {
				n := int(v)
				s.VFs = &n
			}
		}},
		{"eswitch", func(f field) { s.Eswitch = enum(p, f, "", "legacy", "switchdev") }},
		{"flow-steering-mode", func(f field) { s.FlowSteering = enum(p, f, "", "dmfs", "smfs") }},
		{"vf-ipsec", func(f field) {
			if v, ok := p.boolean(f); ok {
				s.VFIPsec = &v
			}
		}},
		{"vf", func(f field) {
			for _, vi := range p.mappings(f, "VF", "index: 0") {
				s.VF = append(s.VF, p.vf(vi))
				vfItems = append(vfItems, vi)
			}
		}},
	})
	return s, vfItems
}

func (p *parser) vf(it item) VFConfig {
	v := VFConfig{Line: it.line, Index: -1}
	p.each(it.node, it.path, []key{
		{"index", func(f field) {
			if n, ok := p.uint(f, 4095); ok {
				v.Index = int(n)
			}
		}},
		{"mac", func(f field) { v.MAC = p.mac(f) }},
		{"vlan", func(f field) {
			if n, ok := p.uint(f, 4094); ok {
				x := int(n)
				v.VLAN = &x
			}
		}},
		{"trust", func(f field) {
			if b, ok := p.boolean(f); ok {
				v.Trust = &b
			}
		}},
		{"spoofchk", func(f field) {
			if b, ok := p.boolean(f); ok {
				v.SpoofChk = &b
			}
		}},
		{"ipsec", func(f field) {
			for _, e := range p.scalars(f, "capability (crypto or packet)") {
				c := enum(p, e, "", "crypto", "packet")
				if c != "" {
					v.IPsec = append(v.IPsec, c)
				}
			}
		}},
	})
	return v
}

func (p *parser) mac(f field) string {
	s, ok := p.str(f, "a MAC address such as 02:00:00:00:00:01")
	if !ok {
		return ""
	}
	hw, err := net.ParseMAC(s)
	switch {
	case err != nil || len(hw) != 6:
		p.errorf(f.line, f.path, "%s is not an Ethernet MAC address; write one such as 02:00:00:00:00:01", show(s))
	case hw[0]&1 != 0:
		p.errorf(f.line, f.path, "%s is a multicast address; a VF needs a unicast MAC (first byte even, such as 02:...)", s)
	case hw.String() == "00:00:00:00:00:00":
		p.errorf(f.line, f.path, "00:00:00:00:00:00 is not a usable MAC; write a locally administered one such as 02:00:00:00:00:01")
	default:
		return hw.String()
	}
	return ""
}

func (p *parser) vtep(it item) (VTEP, []item) {
	v := VTEP{Line: it.line}
	var rs []item
	p.each(it.node, it.path, []key{
		{"name", func(f field) { v.Name = p.ifname(f) }},
		{"type", func(f field) { v.Type = enum(p, f, VTEPVXLAN, VTEPVXLAN, VTEPGeneve) }},
		{"vni", func(f field) {
			n, ok := p.uint(f, 1<<24-1)
			if ok && n == 0 {
				p.errorf(f.line, f.path, "VNI 0 is reserved; use 1 to 16777215")
			}
			v.VNI = uint32(n)
		}},
		{"local", func(f field) { v.Local = p.addr(f, "this host's VTEP address") }},
		{"port", func(f field) { v.Port = p.port(f) }},
		{"remotes", func(f field) {
			if f.val.Kind != yaml.SequenceNode {
				p.errorf(f.line, f.path, "want a list of remote VTEPs (- address: 192.168.80.3), got %s", kindName(f.val))
				return
			}
			for i, c := range f.val.Content {
				n := deref(c)
				path := fmt.Sprintf("%s[%d]", f.path, i)
				ri := item{path: path, line: c.Line, node: n}
				if n.Kind == yaml.ScalarNode && !isNull(n) {
					// A bare address: no route.
					a := p.addr(field{name: "address", path: path, line: c.Line, val: n}, "a remote VTEP address")
					v.Remotes = append(v.Remotes, Remote{Address: a, Line: c.Line})
					rs = append(rs, ri)
					continue
				}
				if n.Kind != yaml.MappingNode {
					p.errorf(c.Line, path, "want a remote VTEP (an address, or address: and via:), got %s", kindName(n))
					continue
				}
				v.Remotes = append(v.Remotes, p.remote(ri))
				rs = append(rs, ri)
			}
		}},
		{"mtu", func(f field) { v.MTU = p.mtu(f) }},
		{"geneve-options", func(f field) {
			n, ok := p.uint(f, 252)
			if ok && n%4 != 0 {
				p.errorf(f.line, f.path, "%d is not a multiple of 4; Geneve options come in 4-byte words", n)
				return
			}
			v.GeneveOptions = int(n)
		}},
		{"addresses", func(f field) {
			for _, e := range p.scalars(f, "address with its prefix length (such as 192.168.90.2/24)") {
				v.Addresses = append(v.Addresses, p.ifaddr(e))
			}
		}},
	})
	return v, rs
}

func (p *parser) remote(it item) Remote {
	r := Remote{Line: it.line}
	p.each(it.node, it.path, []key{
		{"address", func(f field) { r.Address = p.addr(f, "a remote VTEP address") }},
		{"via", func(f field) { r.Via = p.addr(f, "the next hop towards the remote VTEP") }},
	})
	return r
}

func (p *parser) ipsec(it item, m *hostMeta) *IPsec {
	s := &IPsec{}
	p.each(it.node, it.path, []key{
		{"keys", func(f field) {
			s.KeysLine = f.line
			v, ok := p.str(f, "the path of the key file")
			if ok && v == "" {
				p.errorf(f.line, f.path, "is empty; write the path of the key file (mode 0600), such as /etc/sluice/node-a.keys")
				return
			}
			s.Keys = v
		}},
		{"peers", func(f field) {
			for _, pi := range p.mappings(f, "peer", "name: node-b") {
				peer, sels := p.peer(pi)
				s.Peers = append(s.Peers, peer)
				m.peers = append(m.peers, pi)
				m.sels = append(m.sels, sels)
			}
		}},
		{"unsafe-bond-offload", func(f field) { s.UnsafeBondOffload, _ = p.boolean(f) }},
		{"keying", func(f field) { s.Keying = p.peerKeying(f) }},
		{"ike", func(f field) { s.IKE = p.ike(f) }},
	})
	return s
}

func (p *parser) peer(it item) (Peer, []item) {
	pr := Peer{Line: it.line}
	var sels []item
	u32 := func(f field) uint32 {
		v, _ := p.uint(f, 1<<32-1)
		return uint32(v)
	}
	// A policy template with reqid 0 takes any SA between the addresses.
	reqid := func(f field) uint32 {
		v, ok := p.uint(f, 1<<32-1)
		if ok && v == 0 {
			p.errorf(f.line, f.path, "0 means no reqid to the kernel: the policy would take any SA between these addresses; give a non-zero reqid, or leave it out (default: the SPI)")
		}
		return uint32(v)
	}
	p.each(it.node, it.path, []key{
		{"name", func(f field) { pr.Name = p.peerName(f) }},
		{"local", func(f field) { pr.Local = p.addr(f, "this host's IPsec address") }},
		{"remote", func(f field) { pr.Remote = p.addr(f, "the peer's IPsec address") }},
		{"mode", func(f field) { pr.Mode = enum(p, f, ModeTransport, ModeTransport, ModeTunnel) }},
		{"key-bits", func(f field) {
			v, ok := p.uint(f, 1024)
			if ok && v != 128 && v != 256 {
				p.errorf(f.line, f.path, "%d: rfc4106(gcm(aes)) takes 128- or 256-bit AES keys; write 128 or 256", v)
				return
			}
			pr.KeyBits = int(v)
		}},
		{"spi-out", func(f field) { pr.SPIOut = p.spi(f) }},
		{"spi-in", func(f field) { pr.SPIIn = p.spi(f) }},
		{"reqid-out", func(f field) { pr.ReqidOut = reqid(f) }},
		{"reqid-in", func(f field) { pr.ReqidIn = reqid(f) }},
		{"esn", func(f field) { pr.ESN, _ = p.boolean(f) }},
		{"replay-window", func(f field) {
			v, _ := p.uint(f, MaxESNReplay)
			pr.ReplayWindow = int(v)
		}},
		{"offload", func(f field) {
			pr.Offload = enum(p, f, OffloadModeNone, OffloadModeNone, OffloadModeCrypto, OffloadModePacket, OffloadModeAuto)
		}},
		{"offload-out", func(f field) {
			pr.OffloadOut = enum(p, f, "", OffloadModeNone, OffloadModeCrypto, OffloadModePacket, OffloadModeAuto)
		}},
		{"offload-in", func(f field) {
			pr.OffloadIn = enum(p, f, "", OffloadModeNone, OffloadModeCrypto, OffloadModePacket, OffloadModeAuto)
		}},
		{"offload-dev", func(f field) { pr.OffloadDev = p.ifname(f) }},
		{"selectors", func(f field) {
			for _, si := range p.mappings(f, "selector", "local: 10.0.0.0/24") {
				sel := Selector{Line: si.line}
				p.each(si.node, si.path, []key{
					{"local", func(f field) { sel.Local = p.prefix(f) }},
					{"remote", func(f field) { sel.Remote = p.prefix(f) }},
				})
				pr.Selectors = append(pr.Selectors, sel)
				sels = append(sels, si)
			}
		}},
		{"priority", func(f field) { pr.Priority = u32(f) }},
		{"keying", func(f field) { pr.Keying = p.peerKeying(f) }},
		{"local-id", func(f field) { pr.LocalID = p.pathLike(f, "an IKE identity such as 192.168.80.2 or node-a.example") }},
		{"remote-id", func(f field) { pr.RemoteID = p.pathLike(f, "an IKE identity such as 192.168.80.3 or node-b.example") }},
	})
	return pr, sels
}

var peerNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func (p *parser) peerName(f field) string {
	s, ok := p.str(f, "a peer name such as node-b")
	if !ok {
		return ""
	}
	if !peerNameRE.MatchString(s) {
		p.errorf(f.line, f.path, "%s cannot name a peer in the key file; use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", show(s))
		return ""
	}
	return s
}

// spi parses an SPI; 1-255 are reserved by IANA (RFC 4303 2.1) and 0
// cannot be used.
func (p *parser) spi(f field) uint32 {
	v, ok := p.uint(f, 1<<32-1)
	if !ok {
		return 0
	}
	if v < 256 {
		p.errorf(f.line, f.path, "SPI %d is reserved (0-255, RFC 4303); use a value from 256 (0x100) to 4294967295, such as 0x1001", v)
		return 0
	}
	return uint32(v)
}
