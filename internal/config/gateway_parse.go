// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"sluice/internal/yamldoc"
)

// gatewayFile is gateway.yaml as written: every key of the file is
// declared here, once (docs/gateway-config.md describes them). The order
// of the fields is the order messages list the keys in; fill copies them
// by name into Gateway (the daemon-* keys into Gateway.Daemon).
type gatewayFile struct {
	Lab                         flag               `yaml:"lab"`
	PolicySource                PolicySource       `yaml:"policy-source" default:"kernel"`
	Counters                    flag               `yaml:"counters" default:"true"`
	PinDir                      pinDir             `yaml:"pin-dir" default:"/sys/fs/bpf/sluice"`
	Lease                       lease              `yaml:"lease" default:"5s"`
	APISocket                   apiSocket          `yaml:"api-socket" default:"/run/sluice/sluice.sock"`
	APIOwner                    text               `yaml:"api-owner"`
	APIGroup                    text               `yaml:"api-group"`
	MetricsListen               listenAddr         `yaml:"metrics-listen"`
	MetricsTopPolicies          num[max100k]       `yaml:"metrics-top-policies" default:"50"`
	DaemonCPU                   cpuList            `yaml:"daemon-cpu"`
	DaemonPriority              rtPriority         `yaml:"daemon-priority"`
	LockMemory                  flag               `yaml:"lock-memory"`
	FlowerTestSkipHW            flag               `yaml:"flower-test-skip-hw"`
	FlowerTestPlacementInterval placementInterval  `yaml:"flower-test-placement-interval"`
	FlowerInboundChain          num[maxU16]        `yaml:"flower-inbound-chain" default:"1"`
	FlowerPromotePPS            num[maxU32]        `yaml:"flower-promote-pps"`
	AcceptLeaks                 []nonEmpty         `yaml:"accept-leaks" what:"driver behaviour name (no-tx-miss-rule)"`
	Interfaces                  []gatewayInterface `yaml:"interfaces" what:"interface" example:"name: p0"`
	Policies                    []gatewayPolicy    `yaml:"policies" what:"policy" example:"dir: out"`
}

// gatewayInterface is one entry of interfaces: (filled into Interface).
type gatewayInterface struct {
	Name             ifname        `yaml:"name"`
	L2               L2Mode        `yaml:"l2" default:"nic"`
	XDPMode          XDPMode       `yaml:"xdp-mode" default:"native"`
	Inbound          InboundMode   `yaml:"inbound" default:"pass"`
	WANAntispoof     Antispoof     `yaml:"wan-antispoof" default:"none"`
	HairpinToNexthop ipAddr        `yaml:"hairpin-to-nexthop"`
	Flower           FlowerMode    `yaml:"flower" default:"off"`
	FlowerTTL        flag          `yaml:"flower-ttl" default:"true"`
	FlowerRuleBudget num[maxRules] `yaml:"flower-rule-budget" default:"16384"`
}

// gatewayPolicy is one entry of policies: (filled into StaticPolicy).
type gatewayPolicy struct {
	Dir        Direction   `yaml:"dir"`
	Src        ipPrefix    `yaml:"src"`
	Dst        ipPrefix    `yaml:"dst"`
	Proto      Protocol    `yaml:"proto"`
	Sport      port        `yaml:"sport"`
	Dport      port        `yaml:"dport"`
	Priority   num[maxU32] `yaml:"priority"`
	Action     Action      `yaml:"action" default:"allow"`
	Peer       ipAddr      `yaml:"peer"`
	Local      ipAddr      `yaml:"local"`
	Reqid      num[maxU32] `yaml:"reqid"`
	Offload    OffloadMode `yaml:"offload" default:"none"`
	OffloadDev ifname      `yaml:"offload-dev"`
	Optional   flag        `yaml:"optional"`
}

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

// gateway completes g, read from f (the root mapping): the daemon-* keys
// and the lines of the keys given.
func (p *parser) gateway(root *yaml.Node, f *gatewayFile, g *Gateway) *gatewayMeta {
	g.Daemon = DaemonSettings{CPUs: f.DaemonCPU.cpus, CPUList: f.DaemonCPU.list, Priority: int(f.DaemonPriority), LockMemory: bool(f.LockMemory)}
	for _, k := range yamldoc.KeysOf(reflect.TypeFor[gatewayFile]()).Names {
		if p.Given[k] {
			g.KeyLines[k] = p.Lines[k]
		}
	}
	return &gatewayMeta{rootLine: root.Line, ifaces: p.ItemsOf("interfaces", len(g.Interfaces)),
		policies: p.ItemsOf("policies", len(g.Policies)), nIfaces: p.Counts["interfaces"], nPolicies: p.Counts["policies"]}
}

func (s *PolicySource) UnmarshalYAML(n *yaml.Node) error {
	return oneOf(n, s, PolicySourceKernel, PolicySourceStatic)
}

func (s *L2Mode) UnmarshalYAML(n *yaml.Node) error { return oneOf(n, s, L2NIC, L2FIB) }

func (s *XDPMode) UnmarshalYAML(n *yaml.Node) error {
	return oneOf(n, s, XDPNative, XDPGeneric)
}

func (s *InboundMode) UnmarshalYAML(n *yaml.Node) error {
	return oneOf(n, s, InboundPass, InboundForward)
}

func (s *Antispoof) UnmarshalYAML(n *yaml.Node) error {
	return oneOf(n, s, AntispoofNone, AntispoofUpstream)
}

func (s *FlowerMode) UnmarshalYAML(n *yaml.Node) error {
	return oneOf(n, s, FlowerOff, FlowerOutbound, FlowerInbound, FlowerBoth)
}

func (s *Direction) UnmarshalYAML(n *yaml.Node) error { return oneOf(n, s, DirIn, DirOut, DirFwd) }

func (s *Action) UnmarshalYAML(n *yaml.Node) error {
	return oneOf(n, s, ActionAllow, ActionBlock)
}

func (s *OffloadMode) UnmarshalYAML(n *yaml.Node) error {
	return oneOf(n, s, OffloadNone, OffloadPacket)
}

// pinDir is pin-dir: an absolute path, cleaned.
type pinDir = str[pinDirRule]

type pinDirRule struct{}

func (pinDirRule) Want() string { return "an absolute path such as " + DefaultPinDir }
func (pinDirRule) Check(s string) (string, string) {
	switch {
	case s == "":
		return "", "is empty; remove it for the default " + DefaultPinDir + ", or write an absolute path on a bpffs mount"
	case !filepath.IsAbs(s):
		return "", fmt.Sprintf("%q is relative; write an absolute path on a bpffs mount such as %s", s, DefaultPinDir)
	}
	return filepath.Clean(s), ""
}

// leaseRange is MinLease to MaxLease as written in the file.
const leaseRange = "1s to 5m"

// lease is how long the fast path forwards without the daemon.
type lease time.Duration

func (l *lease) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!int" || n.ShortTag() == "!!float") {
		return leafErr(n, "%s has no unit; write a duration such as 5s (from %s)", show(n.Value), leaseRange)
	}
	s, err := scalar(n, "a duration such as 5s")
	if err != nil {
		return err
	}
	d, perr := time.ParseDuration(s)
	if perr != nil {
		return leafErr(n, "%q is not a duration; write one such as 5s, 1500ms or 1m (from %s)", s, leaseRange)
	}
	if d < MinLease || d > MaxLease {
		return leafErr(n, "%s is out of range; use %s (the fast path falls back to the kernel when the daemon is silent this long: shorter risks falling back on a busy host, longer keeps forwarding on stale policies after the daemon dies)", s, leaseRange)
	}
	*l = lease(d)
	return nil
}

// placementInterval is flower-test-placement-interval: how often a lab's
// placement reads the counters (production: DefaultPlacementInterval).
type placementInterval time.Duration

func (v *placementInterval) UnmarshalYAML(n *yaml.Node) error {
	s, err := scalar(n, "a duration such as 500ms")
	if err != nil {
		return err
	}
	d, perr := time.ParseDuration(s)
	if perr != nil || d < MinPlacementInterval || d > MaxPlacementInterval {
		return leafErr(n, "%q is not a duration from %s to %s; write one such as 500ms, or remove it for the production interval of %s",
			s, MinPlacementInterval, MaxPlacementInterval, DefaultPlacementInterval)
	}
	*v = placementInterval(d)
	return nil
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

// mappedMsg refuses IPv4-mapped IPv6 addresses (::ffff:10.0.0.1): they
// pass as IPv6 here, but the kernel encoders (net.IP) write them as IPv4,
// so an SA would get an IPv4 family with /128 selectors. Found by
// FuzzDecodeXFRMEvent's round trip through encodeNewSA.
func mappedMsg(s string, a netip.Addr) string {
	return fmt.Sprintf("%q is an IPv4-mapped IPv6 address; write the IPv4 address %s", s, a.Unmap())
}

// UnmarshalYAML reads a protocol name or number.
func (p *Protocol) UnmarshalYAML(n *yaml.Node) error {
	const want = "tcp, udp, icmp, icmpv6, sctp, udplite or a number from 0 to 255"
	if n.Kind == yaml.ScalarNode {
		if n.ShortTag() == "!!int" {
			v, err := wholeNumber(n, 255)
			*p = Protocol(v)
			return err
		}
		if v, ok := protoNames[n.Value]; ok {
			*p = v
			return nil
		}
		if v, err := strconv.ParseUint(n.Value, 10, 8); err == nil {
			*p = Protocol(v)
			return nil
		}
		if v, ok := protoNames[strings.ToLower(n.Value)]; ok {
			return leafErr(n, "%q: protocol names are lower case; write %s", n.Value, v)
		}
	}
	return leafErr(n, "want %s, got %s", want, kindName(n))
}

var portRange = regexp.MustCompile(`^\s*\d+\s*[-:]\s*\d+\s*$`)

// port is a single port, 1 to 65535.
type port uint16

func (v *port) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" && portRange.MatchString(n.Value) {
		return leafErr(n, "%q is a range, and sluice takes a single port: an XFRM selector holds a port as one value and mask, not a range; write one policy per port, or remove the key to match any port", n.Value)
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return leafErr(n, "want a single port number from 1 to 65535, got %s", kindName(n))
	}
	u, err := wholeNumber(n, 65535)
	if err != nil {
		return err
	}
	if u == 0 {
		return leafErr(n, "port 0 matches nothing; remove the key to match any port")
	}
	*v = port(u)
	return nil
}

// apiSocket is api-socket: an absolute path, cleaned, or "" for no API.
type apiSocket = str[apiSocketRule]

type apiSocketRule struct{}

func (apiSocketRule) Want() string { return "an absolute path such as " + DefaultAPISocket }
func (apiSocketRule) Check(s string) (string, string) {
	switch {
	case s == "":
		return "", "" // no API
	case !filepath.IsAbs(s):
		return "", fmt.Sprintf("%q is relative; write an absolute path such as %s, or \"\" for no API", s, DefaultAPISocket)
	}
	return filepath.Clean(s), ""
}

// listenAddr is host:port, or "" for none.
type listenAddr = str[listenRule]

type listenRule struct{}

func (listenRule) Want() string { return "host:port such as 127.0.0.1:9108" }
func (listenRule) Check(s string) (string, string) {
	if s == "" {
		return "", ""
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil || port == "" {
		return "", fmt.Sprintf("%q is not host:port; write one such as 127.0.0.1:9108 ([::1]:9108 for IPv6)", s)
	}
	if v, err := strconv.Atoi(port); err != nil || v < 1 || v > 65535 {
		return "", fmt.Sprintf("port %q is not between 1 and 65535", port)
	}
	return s, ""
}
