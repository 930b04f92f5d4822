// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// gatewayMeta is what validation needs to know about the document beyond
// the parsed values: where things are.
type gatewayMeta struct {
	rootLine int
	// ifaces and policies hold the path and line of each parsed entry of
	// Gateway.Interfaces and Gateway.Policies (entries that were not
	// mappings are skipped, so indexes can differ from the file's).
	ifaces, policies []item
	// nIfaces and nPolicies count the list items as written.
	nIfaces, nPolicies int
}

// gateway walks the root mapping.
func (p *parser) gateway(root *yaml.Node) (*Gateway, *gatewayMeta) {
	g := &Gateway{File: p.file, KeyLines: map[string]int{}}
	m := &gatewayMeta{rootLine: root.Line}
	p.each(root, "", []key{
		{"lab", func(f field) { g.Lab, _ = p.boolean(f) }},
		{"policy-source", func(f field) { g.PolicySource = enum(p, f, PolicySourceKernel, PolicySourceKernel, PolicySourceStatic) }},
		{"counters", func(f field) { g.Counters, _ = p.boolean(f) }},
		{"pin-dir", func(f field) { g.PinDir = p.pinDir(f) }},
		{"lease", func(f field) { g.Lease = p.lease(f) }},
		{"api-socket", func(f field) { g.APISocket = p.apiSocket(f) }},
		{"api-owner", func(f field) { g.APIOwner, _ = p.str(f, "a user name such as sluice") }},
		{"api-group", func(f field) { g.APIGroup, _ = p.str(f, "a group name such as sluice") }},
		{"metrics-listen", func(f field) { g.MetricsListen = p.listenAddr(f) }},
		{"metrics-top-policies", func(f field) {
			n, _ := p.uint(f, 100000)
			g.MetricsTopPolicies = int(n)
		}},
		{"daemon-cpu", func(f field) { g.Daemon.CPUs, g.Daemon.CPUList = p.daemonCPU(f) }},
		{"daemon-priority", func(f field) { g.Daemon.Priority = p.daemonPriority(f) }},
		{"lock-memory", func(f field) { g.Daemon.LockMemory, _ = p.boolean(f) }},
		{"flower-test-skip-hw", func(f field) { g.FlowerTestSkipHW, _ = p.boolean(f) }},
		{"flower-test-placement-interval", func(f field) { g.FlowerTestPlacementInterval = p.placementInterval(f) }},
		{"flower-inbound-chain", func(f field) {
			n, _ := p.uint(f, MaxFlowerChain)
			g.FlowerInboundChain = uint32(n)
		}},
		{"flower-promote-pps", func(f field) {
			n, _ := p.uint(f, 1<<32-1)
			g.FlowerPromotePPS = int(n)
		}},
		{"interfaces", func(f field) {
			if f.val.Kind == yaml.SequenceNode {
				m.nIfaces = len(f.val.Content)
			}
			for _, it := range p.mappings(f, "interface", "name: p0") {
				g.Interfaces = append(g.Interfaces, p.iface(it))
				m.ifaces = append(m.ifaces, it)
			}
		}},
		{"policies", func(f field) {
			if f.val.Kind == yaml.SequenceNode {
				m.nPolicies = len(f.val.Content)
			}
			for _, it := range p.mappings(f, "policy", "dir: out") {
				g.Policies = append(g.Policies, p.policy(it))
				m.policies = append(m.policies, it)
			}
		}},
	}, func(f field) {
		g.KeyLines[f.name] = f.line
	})
	return g, m
}

func (p *parser) pinDir(f field) string {
	s, ok := p.str(f, "an absolute path such as "+DefaultPinDir)
	if !ok {
		return ""
	}
	switch {
	case s == "":
		p.errorf(f.line, f.path, "is empty; remove it for the default %s, or write an absolute path on a bpffs mount", DefaultPinDir)
		return ""
	case !filepath.IsAbs(s):
		p.errorf(f.line, f.path, "%q is relative; write an absolute path on a bpffs mount such as %s", s, DefaultPinDir)
		return ""
	}
	return filepath.Clean(s)
}

// leaseRange is MinLease to MaxLease as written in the file.
const leaseRange = "1s to 5m"

func (p *parser) lease(f field) time.Duration {
	if f.val.Kind == yaml.ScalarNode && (f.val.ShortTag() == "!!int" || f.val.ShortTag() == "!!float") {
		p.errorf(f.line, f.path, "%s has no unit; write a duration such as 5s (from %s)", show(f.val.Value), leaseRange)
		return 0
	}
	s, ok := p.str(f, "a duration such as 5s")
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		p.errorf(f.line, f.path, "%q is not a duration; write one such as 5s, 1500ms or 1m (from %s)", s, leaseRange)
		return 0
	}
	if d < MinLease || d > MaxLease {
		p.errorf(f.line, f.path, "%s is out of range; use %s (the fast path falls back to the kernel when the daemon is silent this long: shorter risks falling back on a busy host, longer keeps forwarding on stale policies after the daemon dies)", s, leaseRange)
		return 0
	}
	return d
}

// placementInterval reads flower-test-placement-interval: how often a lab's
// placement reads the counters (production: DefaultPlacementInterval).
func (p *parser) placementInterval(f field) time.Duration {
	s, ok := p.str(f, "a duration such as 500ms")
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < MinPlacementInterval || d > MaxPlacementInterval {
		p.errorf(f.line, f.path, "%q is not a duration from %s to %s; write one such as 500ms, or remove it for the production interval of %s",
			s, MinPlacementInterval, MaxPlacementInterval, DefaultPlacementInterval)
		return 0
	}
	return d
}

// iface walks one entry of interfaces.
func (p *parser) iface(it item) Interface {
	ifc := Interface{Line: it.line}
	p.each(it.node, it.path, []key{
		{"name", func(f field) { ifc.Name = p.ifname(f) }},
		{"l2", func(f field) { ifc.L2 = enum(p, f, L2NIC, L2NIC, L2FIB) }},
		{"xdp-mode", func(f field) { ifc.XDPMode = enum(p, f, XDPNative, XDPNative, XDPGeneric) }},
		{"inbound", func(f field) { ifc.Inbound = enum(p, f, InboundPass, InboundPass, InboundForward) }},
		{"wan-antispoof", func(f field) { ifc.WANAntispoof = enum(p, f, AntispoofNone, AntispoofNone, AntispoofUpstream) }},
		{"hairpin-to-nexthop", func(f field) { ifc.HairpinToNexthop = p.addr(f, "a next-hop address") }},
		{"flower", func(f field) {
			ifc.Flower = enum(p, f, FlowerOff, FlowerOff, FlowerOutbound, FlowerInbound, FlowerBoth)
		}},
		{"flower-ttl", func(f field) { ifc.FlowerTTL, _ = p.boolean(f) }},
		{"flower-rule-budget", func(f field) {
			n, _ := p.uint(f, MaxFlowerRuleBudget)
			ifc.FlowerRuleBudget = int(n)
		}},
	})
	return ifc
}

// policy walks one entry of policies.
func (p *parser) policy(it item) StaticPolicy {
	sp := StaticPolicy{Line: it.line}
	p.each(it.node, it.path, []key{
		{"dir", func(f field) { sp.Dir = enum(p, f, "", DirIn, DirOut, DirFwd) }},
		{"src", func(f field) { sp.Src = p.prefix(f) }},
		{"dst", func(f field) { sp.Dst = p.prefix(f) }},
		{"proto", func(f field) { sp.Proto = p.proto(f) }},
		{"sport", func(f field) { sp.Sport = p.port(f) }},
		{"dport", func(f field) { sp.Dport = p.port(f) }},
		{"priority", func(f field) {
			v, _ := p.uint(f, 1<<32-1)
			sp.Priority = uint32(v)
		}},
		{"action", func(f field) { sp.Action = enum(p, f, ActionAllow, ActionAllow, ActionBlock) }},
		{"peer", func(f field) { sp.Peer = p.addr(f, "the remote tunnel endpoint") }},
		{"local", func(f field) { sp.Local = p.addr(f, "our tunnel endpoint") }},
		{"reqid", func(f field) {
			v, _ := p.uint(f, 1<<32-1)
			sp.Reqid = uint32(v)
		}},
		{"offload", func(f field) { sp.Offload = enum(p, f, OffloadNone, OffloadNone, OffloadPacket) }},
		{"offload-dev", func(f field) { sp.OffloadDev = p.ifname(f) }},
		{"optional", func(f field) { sp.Optional, _ = p.boolean(f) }},
	})
	return sp
}

// ifname parses a Linux interface name.
func (p *parser) ifname(f field) string {
	s, ok := p.str(f, "a Linux interface name such as p0")
	if !ok {
		return ""
	}
	if problem := ifnameProblem(s); problem != "" {
		p.errorf(f.line, f.path, "%s", problem)
		return ""
	}
	return s
}

// ifnameProblem applies the kernel's dev_valid_name rules (plus no
// control characters); it returns "" for a valid name.
func ifnameProblem(s string) string {
	switch {
	case s == "":
		return "is empty; write a Linux interface name such as p0"
	case len(s) > 15:
		return fmt.Sprintf("%q is %d bytes long; Linux interface names have 1 to 15", s, len(s))
	case s == "." || s == "..":
		return fmt.Sprintf("%q is not a valid Linux interface name; write one such as p0", s)
	}
	for _, r := range s {
		if r == '/' || r == ':' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Sprintf("%q contains %q; Linux interface names cannot contain '/', ':', whitespace or control characters", s, r)
		}
	}
	return ""
}

// InterfaceNameProblem says why s is not a name the kernel would accept
// for an interface, or "". Every name that reaches a generated script or
// a printed command goes through it: a newline in a name would start a
// command of its own.
func InterfaceNameProblem(s string) string { return ifnameProblem(s) }

// addr parses an IP address (IPv4 or IPv6, no zone, not unspecified).
func (p *parser) addr(f field, what string) netip.Addr {
	s, ok := p.str(f, what+" (an IP address)")
	if !ok {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		p.errorf(f.line, f.path, "%q is not an IP address; write %s such as 192.0.2.1 or 2001:db8::1", s, what)
	case a.Zone() != "":
		p.errorf(f.line, f.path, "%q has an IPv6 zone; remove %%%s (the interface is known from the rest of the file)", s, show(a.Zone()))
	case a.IsUnspecified():
		p.errorf(f.line, f.path, "%s is the unspecified address; write %s", s, what)
	case a.Is4In6():
		p.errorf(f.line, f.path, "%s", mappedMsg(s, a))
	default:
		return a
	}
	return netip.Addr{}
}

// mappedMsg refuses IPv4-mapped IPv6 addresses (::ffff:10.0.0.1): they
// pass as IPv6 here, but the kernel encoders (net.IP) write them as IPv4,
// so an SA would get an IPv4 family with /128 selectors. Found by
// FuzzDecodeXFRMEvent's round trip through encodeNewSA.
func mappedMsg(s string, a netip.Addr) string {
	return fmt.Sprintf("%q is an IPv4-mapped IPv6 address; write the IPv4 address %s", s, a.Unmap())
}

// prefix parses a selector prefix; a bare address is a /32 or /128.
func (p *parser) prefix(f field) netip.Prefix {
	s, ok := p.str(f, "a prefix such as 10.0.0.0/8")
	if !ok {
		return netip.Prefix{}
	}
	var pf netip.Prefix
	if strings.Contains(s, "/") {
		v, err := netip.ParsePrefix(s)
		if err != nil {
			p.errorf(f.line, f.path, "%q is not an IP prefix; write one such as 10.0.0.0/8 or 2001:db8::/32, or a bare address for one host", s)
			return netip.Prefix{}
		}
		if v != v.Masked() {
			p.errorf(f.line, f.path, "%q has bits set after the /%d; write %s", s, v.Bits(), v.Masked())
			return netip.Prefix{}
		}
		if v.Addr().Is4In6() {
			p.errorf(f.line, f.path, "%s", mappedMsg(s, v.Addr()))
			return netip.Prefix{}
		}
		pf = v
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			p.errorf(f.line, f.path, "%q is not an IP prefix; write one such as 10.0.0.0/8 or 2001:db8::/32, or a bare address for one host", s)
			return netip.Prefix{}
		}
		if a.Zone() != "" {
			p.errorf(f.line, f.path, "%q has an IPv6 zone; selectors have none: remove %%%s", s, show(a.Zone()))
			return netip.Prefix{}
		}
		if a.Is4In6() {
			p.errorf(f.line, f.path, "%s", mappedMsg(s, a))
			return netip.Prefix{}
		}
		pf = netip.PrefixFrom(a, a.BitLen())
	}
	return pf
}

// proto parses a protocol name or number.
func (p *parser) proto(f field) Protocol {
	const want = "tcp, udp, icmp, icmpv6, sctp, udplite or a number from 0 to 255"
	n := f.val
	if n.Kind == yaml.ScalarNode {
		if n.ShortTag() == "!!int" {
			v, _ := p.uint(f, 255)
			return Protocol(v)
		}
		if v, ok := protoNames[n.Value]; ok {
			return v
		}
		if v, err := strconv.ParseUint(n.Value, 10, 8); err == nil {
			return Protocol(v)
		}
		if v, ok := protoNames[strings.ToLower(n.Value)]; ok {
			p.errorf(f.line, f.path, "%q: protocol names are lower case; write %s", n.Value, v)
			return ProtoAny
		}
	}
	p.errorf(f.line, f.path, "want %s, got %s", want, kindName(n))
	return ProtoAny
}

var portRangeRE = regexp.MustCompile(`^\s*\d+\s*[-:]\s*\d+\s*$`)

// port parses a single port, 1 to 65535.
func (p *parser) port(f field) uint16 {
	n := f.val
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" && portRangeRE.MatchString(n.Value) {
		p.errorf(f.line, f.path, "%q is a range, and sluice takes a single port: an XFRM selector holds a port as one value and mask, not a range; write one policy per port, or remove %s to match any port", n.Value, f.name)
		return 0
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		p.errorf(f.line, f.path, "want a single port number from 1 to 65535, got %s", kindName(n))
		return 0
	}
	v, ok := p.uint(f, 65535)
	if !ok {
		return 0
	}
	if v == 0 {
		p.errorf(f.line, f.path, "port 0 matches nothing; remove %s to match any port", f.name)
		return 0
	}
	return uint16(v)
}

func (p *parser) apiSocket(f field) string {
	s, ok := p.str(f, "an absolute path such as "+DefaultAPISocket)
	if !ok || s == "" {
		return "" // empty: no API
	}
	if !filepath.IsAbs(s) {
		p.errorf(f.line, f.path, "%q is relative; write an absolute path such as %s, or \"\" for no API", s, DefaultAPISocket)
		return ""
	}
	return filepath.Clean(s)
}

func (p *parser) listenAddr(f field) string {
	s, ok := p.str(f, "host:port such as 127.0.0.1:9108")
	if !ok || s == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || port == "" {
		p.errorf(f.line, f.path, "%q is not host:port; write one such as 127.0.0.1:9108 ([::1]:9108 for IPv6)", s)
		return ""
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		p.errorf(f.line, f.path, "port %q is not between 1 and 65535", port)
		return ""
	}
	_ = host
	return s
}
