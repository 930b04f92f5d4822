// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// doc joins lines with newlines, so that the n-th argument is on line n.
func doc(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

// ifaceDoc is a gateway whose interfaces list has one entry: fields[0] is
// on line 2, fields[i] on line 2+i.
func ifaceDoc(fields ...string) string {
	return doc(append([]string{"interfaces:"}, listItems(fields)...)...)
}

// policyDoc is a static lab gateway with interface p0 and one policy:
// fields[0] is on line 6, fields[i] on line 6+i.
func policyDoc(fields ...string) string {
	return doc(append([]string{"lab: true", "policy-source: static", "interfaces:", "  - name: p0", "policies:"}, listItems(fields)...)...)
}

// listItems indents fields as entries of a block list: the first field
// and fields starting with "- " begin an entry; the others continue it.
func listItems(fields []string) []string {
	var out []string
	for i, f := range fields {
		switch {
		case i == 0:
			out = append(out, "  - "+f)
		case strings.HasPrefix(f, "- "), strings.HasPrefix(f, "  "):
			out = append(out, "  "+f)
		default:
			out = append(out, "    "+f)
		}
	}
	return out
}

// tunnel is the usual IPv4 allow policy for policyDoc, lines 6-10.
var tunnel = []string{"dir: out", "src: 10.0.0.0/8", "dst: 48.0.1.0/24", "peer: 123.2.0.1", "local: 123.0.0.1"}

func with(base []string, extra ...string) []string {
	return append(append([]string(nil), base...), extra...)
}

// fullExample sets every key of the schema.
var fullExample = doc(
	"lab: true",
	"policy-source: static",
	"counters: false",
	"pin-dir: /sys/fs/bpf/sluice-test/",
	"lease: 30s",
	"interfaces:",
	"  - name: p0",
	"    l2: fib",
	"    xdp-mode: generic",
	"    inbound: forward",
	"    wan-antispoof: upstream",
	"    hairpin-to-nexthop: 10.0.0.1",
	"  - name: p0.502",
	"    l2: nic",
	"    xdp-mode: native",
	"    inbound: pass",
	"    wan-antispoof: none",
	"    hairpin-to-nexthop:",
	"policies:",
	"  - dir: out",
	"    src: 10.0.0.0/8",
	"    dst: 48.0.1.0/24",
	"    proto: udp",
	"    sport: 1000",
	"    dport: 443",
	"    priority: 100",
	"    action: allow",
	"    peer: 123.2.0.1",
	"    local: 123.0.0.1",
	"    reqid: 1",
	"    offload: packet",
	"    offload-dev: p0",
	"    optional: false",
	"  - dir: fwd",
	"    src: 2001:db8:1::/48",
	"    dst: 2001:db8:2::7",
	"    proto: 58",
	"    priority: 4294967295",
	"    action: block",
	"    reqid: 0",
	"    offload: none",
	"    optional: true",
	"  - dir: in",
	"    src: 48.0.1.0/24",
	"    dst: 10.0.0.0/8",
	"    proto: sctp",
	"    dport: 65535",
	"    peer: 123.2.0.1",
	"    local: 123.0.0.1",
	"api-socket: /run/sluice-test/api.sock",
	"api-owner: daemon",
	"api-group: adm",
	"metrics-listen: 127.0.0.1:9108",
	"metrics-top-policies: 20",
)

func TestParseGatewayFullExample(t *testing.T) {
	g, err := ParseGateway([]byte(fullExample), "gateway.yaml")
	if err != nil {
		t.Fatalf("ParseGateway: %v", err)
	}
	want := &Gateway{
		File:         "gateway.yaml",
		Lab:          true,
		PolicySource: PolicySourceStatic,
		Counters:     false,
		PinDir:       "/sys/fs/bpf/sluice-test",
		Lease:        30 * time.Second,
		APISocket:    "/run/sluice-test/api.sock", APIOwner: "daemon", APIGroup: "adm",
		MetricsListen: "127.0.0.1:9108", MetricsTopPolicies: 20, FlowerInboundChain: DefaultFlowerInboundChain,
		Interfaces: []Interface{
			{Name: "p0", L2: L2FIB, XDPMode: XDPGeneric, Inbound: InboundForward, WANAntispoof: AntispoofUpstream,
				HairpinToNexthop: netip.MustParseAddr("10.0.0.1"), Flower: FlowerOff, FlowerTTL: true, FlowerRuleBudget: DefaultFlowerRuleBudget, Line: 7},
			{Name: "p0.502", L2: L2NIC, XDPMode: XDPNative, Inbound: InboundPass, WANAntispoof: AntispoofNone, Flower: FlowerOff, FlowerTTL: true, FlowerRuleBudget: DefaultFlowerRuleBudget, Line: 13},
		},
		Policies: []StaticPolicy{
			{Dir: DirOut, Src: netip.MustParsePrefix("10.0.0.0/8"), Dst: netip.MustParsePrefix("48.0.1.0/24"),
				Proto: ProtoUDP, Sport: 1000, Dport: 443, Priority: 100, Action: ActionAllow,
				Peer: netip.MustParseAddr("123.2.0.1"), Local: netip.MustParseAddr("123.0.0.1"), Reqid: 1,
				Offload: OffloadPacket, OffloadDev: "p0", Optional: false, Line: 20},
			{Dir: DirFwd, Src: netip.MustParsePrefix("2001:db8:1::/48"), Dst: netip.MustParsePrefix("2001:db8:2::7/128"),
				Proto: ProtoICMPv6, Priority: 4294967295, Action: ActionBlock, Offload: OffloadNone, Optional: true, Line: 34},
			{Dir: DirIn, Src: netip.MustParsePrefix("48.0.1.0/24"), Dst: netip.MustParsePrefix("10.0.0.0/8"),
				Proto: ProtoSCTP, Dport: 65535, Action: ActionAllow,
				Peer: netip.MustParseAddr("123.2.0.1"), Local: netip.MustParseAddr("123.0.0.1"), Offload: OffloadNone, Line: 43},
		},
		KeyLines: map[string]int{"lab": 1, "policy-source": 2, "counters": 3, "pin-dir": 4, "lease": 5, "interfaces": 6, "policies": 19,
			"api-socket": 50, "api-owner": 51, "api-group": 52, "metrics-listen": 53, "metrics-top-policies": 54},
	}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("ParseGateway(full example):\n got %+v\nwant %+v", g, want)
	}
}

func TestParseGatewayDefaults(t *testing.T) {
	g, err := ParseGateway([]byte(doc("interfaces:", "  - name: p0")), "gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &Gateway{
		File: "gateway.yaml", Lab: false, PolicySource: PolicySourceKernel, Counters: true,
		PinDir: "/sys/fs/bpf/sluice", Lease: 5 * time.Second, APISocket: DefaultAPISocket, MetricsTopPolicies: DefaultTopPolicies,
		FlowerInboundChain: DefaultFlowerInboundChain,
		Interfaces:         []Interface{{Name: "p0", L2: L2NIC, XDPMode: XDPNative, Inbound: InboundPass, WANAntispoof: AntispoofNone, Flower: FlowerOff, FlowerTTL: true, FlowerRuleBudget: DefaultFlowerRuleBudget, Line: 2}},
		KeyLines:           map[string]int{"interfaces": 1},
	}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", g, want)
	}

	// Empty values mean "the default", like absent keys.
	g, err = ParseGateway([]byte(doc("lab:", "policy-source:", "counters:", "pin-dir:", "lease: ~", "policies:", "interfaces:", "  - name: p0", "    l2:", "    inbound: null")), "gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want.Interfaces[0].Line = 8
	want.KeyLines = map[string]int{"interfaces": 7} // keys with null values are not recorded
	if !reflect.DeepEqual(g, want) {
		t.Errorf("null values:\n got %+v\nwant %+v", g, want)
	}

	g, err = ParseGateway([]byte(policyDoc("dir: out", "src: 10.0.0.0/8", "dst: 48.0.0.0/8", "peer: 1.2.3.4", "local: 5.6.7.8")), "gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wantPol := StaticPolicy{Dir: DirOut, Src: netip.MustParsePrefix("10.0.0.0/8"), Dst: netip.MustParsePrefix("48.0.0.0/8"),
		Proto: ProtoAny, Priority: 0, Action: ActionAllow, Peer: netip.MustParseAddr("1.2.3.4"), Local: netip.MustParseAddr("5.6.7.8"),
		Reqid: 0, Offload: OffloadNone, Optional: false, Line: 6}
	if len(g.Policies) != 1 || g.Policies[0] != wantPol {
		t.Errorf("policy defaults:\n got %+v\nwant %+v", g.Policies, wantPol)
	}
}

func TestBareAddressIsHostPrefix(t *testing.T) {
	for _, tc := range []struct{ src, dst, peer, local, wantSrc, wantDst string }{
		{"10.1.2.3", "48.0.0.0/8", "1.1.1.1", "2.2.2.2", "10.1.2.3/32", "48.0.0.0/8"},
		{"2001:db8::1", `"2001:db8:ffff::"`, "2001:db8::a", "2001:db8::b", "2001:db8::1/128", "2001:db8:ffff::/128"},
		{"0.0.0.0/0", "192.0.2.7", "1.1.1.1", "2.2.2.2", "0.0.0.0/0", "192.0.2.7/32"},
	} {
		g, err := ParseGateway([]byte(policyDoc("dir: out", "src: "+tc.src, "dst: "+tc.dst, "peer: "+tc.peer, "local: "+tc.local)), "gateway.yaml")
		if err != nil {
			t.Errorf("src %s dst %s: %v", tc.src, tc.dst, err)
			continue
		}
		p := g.Policies[0]
		if p.Src != netip.MustParsePrefix(tc.wantSrc) || p.Dst != netip.MustParsePrefix(tc.wantDst) {
			t.Errorf("src %s dst %s: got %s %s, want %s %s", tc.src, tc.dst, p.Src, p.Dst, tc.wantSrc, tc.wantDst)
		}
	}
}

func TestParseGatewayAliasesAndMergeKeys(t *testing.T) {
	in := policyDoc(
		"&base",
		"dir: out", // 7
		"src: 10.0.0.0/8",
		"dst: 48.0.0.0/8",
		"priority: 7",
		"peer: 1.2.3.4",
		"local: 5.6.7.8",
		"offload: packet",
		"offload-dev: p0",
		"- <<: *base", // 15
		"  dir: in",
		"  src: 48.0.0.0/8",
		"  dst: 10.0.0.0/8",
		"- <<: [*base]",
		"  dir: fwd",
		"  src: 48.0.0.0/8",
		"  dst: 10.0.0.0/8",
		"  offload:",
		"  offload-dev: ~",
		"- *base", // 25: the same policy twice
	)
	_, err := ParseGateway([]byte(in), "gw.yaml")
	var ve *ValidationErrors
	if !errors.As(err, &ve) || len(ve.Errors) != 1 {
		t.Fatalf("want exactly the duplicate-policy error, got %v\n%s", err, in)
	}
	if e := ve.Errors[0]; e.Line != 25 || e.Path != "policies[3]" || !strings.Contains(e.Msg, "same dir and selector as policies[0] (line 6)") {
		t.Errorf("got %q", e.Error())
	}

	in = strings.TrimSuffix(in, "  - *base\n")
	g, err := ParseGateway([]byte(in), "gw.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, in)
	}
	if len(g.Policies) != 3 {
		t.Fatalf("got %d policies", len(g.Policies))
	}
	in2, fwd := g.Policies[1], g.Policies[2]
	if in2.Dir != DirIn || in2.Priority != 7 || in2.Offload != OffloadPacket || in2.OffloadDev != "p0" || in2.Src.String() != "48.0.0.0/8" {
		t.Errorf("merged in policy: %+v", in2)
	}
	// Explicit null overrides the merged value, so the fwd policy falls
	// back to the default (fwd policies cannot be offloaded).
	if fwd.Dir != DirFwd || fwd.Offload != OffloadNone || fwd.OffloadDev != "" || fwd.Peer.String() != "1.2.3.4" {
		t.Errorf("merged fwd policy: %+v", fwd)
	}
}

type wantErr struct {
	line int
	path string
	sub  string
}

// errorCases has one case per rule; each lists every error it expects, so
// a spurious extra error fails too. The fuzz test seeds from it.
var errorCases = []struct {
	name string
	in   string
	want []wantErr
}{
	// The document.
	{"empty file", "", []wantErr{{1, "", "the file is empty"}}},
	{"only comments", "# nothing yet\n\n", []wantErr{{1, "", "the file is empty"}}},
	{"explicit null document", "---\n~\n", []wantErr{{1, "", "the file is empty"}}},
	{"top level is a list", "- name: p0\n", []wantErr{{1, "", "the top level must be a mapping"}}},
	{"second document", doc("interfaces: [{name: p0}]", "---", "lab: true"), []wantErr{{2, "", "a second YAML document starts here"}}},
	{"syntax error", doc("interfaces:", "  - name: p0", "     inbound: pass"), []wantErr{{3, "", "invalid YAML"}}},
	{"tab on the first line", "\tlab: true\n", []wantErr{{1, "", "invalid YAML"}}},
	{"control character", doc("lab: false", "interfaces:", "  - name: p\x010"), []wantErr{{3, "", "control characters are not allowed"}}},
	{"invalid UTF-8", doc("lab: false", "interfaces:", "  - name: p\xff"), []wantErr{{3, "", "invalid YAML"}}},
	{"unquoted IPv6 ending in ::", policyDoc("dir: out", "src: 2001:db8::/32", "dst: 2001:db8:1::", "action: block"), []wantErr{{8, "", "an IPv6 address ending in :: must be quoted"}}},
	{"unknown anchor", doc("interfaces:", "  - *iface"), []wantErr{{2, "", "must come after its anchor"}}},

	// Unknown and duplicate keys, wrong types.
	{"unknown root key", doc("interfaces: [{name: p0}]", "vlans: []"), []wantErr{{2, "vlans", "unknown key; the keys here are lab, policy-source"}}},
	{"misspelt root key", doc("pin_dir: /sys/fs/bpf/x", "interfaces: [{name: p0}]"), []wantErr{{1, "pin_dir", "did you mean pin-dir?"}}},
	{"unknown interface key", ifaceDoc("name: p0", "xdp_mode: native"), []wantErr{{3, "interfaces[0].xdp_mode", "did you mean xdp-mode?"}}},
	{"unknown policy key", policyDoc(with(tunnel, "spi: 0x100")...), []wantErr{{11, "policies[0].spi", "unknown key; the keys here are dir, src, dst"}}},
	{"non-scalar key", doc("interfaces: [{name: p0}]", "? [a, b]", ": 1"), []wantErr{{2, "", "a key must be a plain word"}}},
	{"duplicate root key", doc("lab: true", "interfaces: [{name: p0}]", "lab: false"), []wantErr{{3, "lab", "set twice (first on line 1)"}}},
	{"duplicate interface key", ifaceDoc("name: p0", "name: p1"), []wantErr{{3, "interfaces[0].name", "set twice (first on line 2)"}}},
	{"bool as yes", doc("counters: yes", "interfaces: [{name: p0}]"), []wantErr{{1, "counters", `want true or false, got the string "yes"`}}},
	{"quoted bool", doc(`lab: "true"`, "interfaces: [{name: p0}]"), []wantErr{{1, "lab", "is quoted"}}},
	{"bool as list", doc("interfaces: [{name: p0}]", "counters: [true]"), []wantErr{{2, "counters", "want true or false, got a list"}}},
	{"interfaces not a list", doc("interfaces: p0"), []wantErr{{1, "interfaces", "want a list of interfaces"}}},
	{"interface as a string", doc("interfaces:", "  - p0"), []wantErr{{2, "interfaces[0]", "want an interface written as keys (such as - name: p0)"}}},
	{"empty list item", doc("interfaces:", "  - name: p0", "  -"), []wantErr{{3, "interfaces[1]", "empty list item"}}},
	{"name as mapping", ifaceDoc("name: {a: b}"), []wantErr{{2, "interfaces[0].name", "want a Linux interface name such as p0, got a mapping"}}},
	{"priority not a number", policyDoc(with(tunnel, "priority: high")...), []wantErr{{11, "policies[0].priority", `want a whole number from 0 to 4294967295, got the string "high"`}}},
	{"priority too large", policyDoc(with(tunnel, "priority: 4294967296")...), []wantErr{{11, "policies[0].priority", "out of range; use a number from 0 to 4294967295"}}},
	{"reqid negative", policyDoc(with(tunnel, "reqid: -1")...), []wantErr{{11, "policies[0].reqid", "-1 is negative"}}},
	{"reqid quoted", policyDoc(with(tunnel, `reqid: "1"`)...), []wantErr{{11, "policies[0].reqid", `got the string "1"`}}},
	{"merge of a scalar", doc("interfaces:", "  - <<: 5", "    name: p0"), []wantErr{{2, "interfaces[0].<<", "a merge key takes a mapping"}}},

	// Interfaces.
	{"interfaces missing", doc("lab: false"), []wantErr{{1, "interfaces", "missing; list at least one interface"}}},
	{"interfaces empty", doc("lab: false", "interfaces: []"), []wantErr{{2, "interfaces", "the list is empty"}}},
	{"interfaces null", doc("lab: false", "interfaces:"), []wantErr{{2, "interfaces", "missing; list at least one interface"}}},
	{"interface without name", ifaceDoc("l2: fib"), []wantErr{{2, "interfaces[0].name", "missing; every interface needs the Linux interface name"}}},
	{"name too long", ifaceDoc("name: enp1s0f0np0.1234"), []wantErr{{2, "interfaces[0].name", "is 16 bytes long; Linux interface names have 1 to 15"}}},
	{"name with slash", ifaceDoc("name: p0/1"), []wantErr{{2, "interfaces[0].name", `contains '/'`}}},
	{"name with space", ifaceDoc(`name: "p0 "`), []wantErr{{2, "interfaces[0].name", `contains ' '`}}},
	{"name empty", ifaceDoc(`name: ""`), []wantErr{{2, "interfaces[0].name", "is empty"}}},
	{"duplicate interface", doc("interfaces:", "  - name: p0", "  - name: p1", "  - name: p0"), []wantErr{{4, "interfaces[2].name", `"p0" is listed twice (first on line 2)`}}},
	{"bad l2", ifaceDoc("name: p0", "l2: mac"), []wantErr{{3, "interfaces[0].l2", `"mac" is not valid; use one of nic (default) or fib`}}},
	{"bad xdp-mode", ifaceDoc("name: p0", "xdp-mode: offload"), []wantErr{{3, "interfaces[0].xdp-mode", `"offload" is not valid; use one of native (default) or generic`}}},
	{"bad inbound", ifaceDoc("name: p0", "inbound: drop"), []wantErr{{3, "interfaces[0].inbound", `"drop" is not valid; use one of pass (default) or forward`}}},
	{"bad wan-antispoof", ifaceDoc("name: p0", "inbound: forward", "wan-antispoof: yes"), []wantErr{{4, "interfaces[0].wan-antispoof", `"yes" is not valid; use one of none (default) or upstream`}}},
	{"inbound forward without antispoof", doc(
		"lab: false",
		"interfaces:",
		"  - name: p0",
		"    inbound: pass",
		"  - name: p1",
		"    l2: nic",
		"    inbound: forward",
	), []wantErr{{7, "interfaces[1].inbound", `"forward" needs wan-antispoof: upstream on the same interface — XDP cannot tell a packet the NIC decrypted from spoofed cleartext`}}},
	{"inbound forward with antispoof none", ifaceDoc("name: p0", "wan-antispoof: none", "inbound: forward"), []wantErr{{4, "interfaces[0].inbound", "set wan-antispoof: upstream if that is true, or inbound: pass"}}},
	{"hairpin without forward", ifaceDoc("name: p0", "hairpin-to-nexthop: 10.0.0.1"), []wantErr{{3, "interfaces[0].hairpin-to-nexthop", "only applies with inbound: forward"}}},
	{"hairpin not an address", ifaceDoc("name: p0", "inbound: forward", "wan-antispoof: upstream", "hairpin-to-nexthop: gw1"), []wantErr{{5, "interfaces[0].hairpin-to-nexthop", `"gw1" is not an IP address`}}},
	{"hairpin with zone", ifaceDoc("name: p0", "inbound: forward", "wan-antispoof: upstream", "hairpin-to-nexthop: fe80::1%p0"), []wantErr{{5, "interfaces[0].hairpin-to-nexthop", "has an IPv6 zone"}}},

	// Root keys.
	{"bad policy-source", doc("policy-source: vici", "interfaces: [{name: p0}]"), []wantErr{{1, "policy-source", `"vici" is not valid; use one of kernel (default) or static`}}},
	{"static without lab", doc("policy-source: static", "interfaces: [{name: p0}]"), []wantErr{{1, "policy-source", "static policies are for labs and offline tests; a production gateway mirrors the kernel: set lab: true or policy-source: kernel"}}},
	{"static with lab false", doc("lab: false", "interfaces: [{name: p0}]", "policy-source: static"), []wantErr{{3, "policy-source", "needs lab: true"}}},
	{"policies with default source", doc("interfaces: [{name: p0}]", "policies:", "  - {dir: out, src: 10.0.0.0/8, dst: 48.0.0.0/8, peer: 1.1.1.1, local: 2.2.2.2}"), []wantErr{{2, "policies", "policy-source is kernel, so sluice mirrors the kernel's XFRM policies and would ignore these 1"}}},
	{"policies with kernel source", doc("lab: true", "policy-source: kernel", "interfaces: [{name: p0}]", "policies: [{dir: out, src: 10.0.0.0/8, dst: 48.0.0.0/8, action: block}]"), []wantErr{{4, "policies", "for a lab set policy-source: static and lab: true"}}},
	{"api-socket relative", doc("interfaces: [{name: p0}]", "api-socket: run/s.sock"), []wantErr{{2, "api-socket", `"run/s.sock" is relative`}}},
	{"metrics-listen without port", doc("interfaces: [{name: p0}]", "metrics-listen: 127.0.0.1"), []wantErr{{2, "metrics-listen", "is not host:port"}}},
	{"metrics-listen bad port", doc("interfaces: [{name: p0}]", "metrics-listen: ':99999'"), []wantErr{{2, "metrics-listen", "is not between 1 and 65535"}}},
	{"lease too short", doc("lease: 500ms", "interfaces: [{name: p0}]"), []wantErr{{1, "lease", "500ms is out of range; use 1s to 5m"}}},
	{"lease too long", doc("interfaces: [{name: p0}]", "lease: 6m"), []wantErr{{2, "lease", "6m is out of range; use 1s to 5m"}}},
	{"lease negative", doc("interfaces: [{name: p0}]", "lease: -5s"), []wantErr{{2, "lease", "out of range"}}},
	{"lease without unit", doc("interfaces: [{name: p0}]", "lease: 5"), []wantErr{{2, "lease", "5 has no unit; write a duration such as 5s"}}},
	{"lease not a duration", doc("interfaces: [{name: p0}]", "lease: soon"), []wantErr{{2, "lease", `"soon" is not a duration`}}},
	{"pin-dir relative", doc("pin-dir: bpf/sluice", "interfaces: [{name: p0}]"), []wantErr{{1, "pin-dir", `"bpf/sluice" is relative`}}},
	{"pin-dir empty", doc(`pin-dir: ""`, "interfaces: [{name: p0}]"), []wantErr{{1, "pin-dir", "is empty"}}},

	// Policies: required keys and values.
	{"policy without dir", policyDoc(tunnel[1:]...), []wantErr{{6, "policies[0].dir", "missing; set dir: in, out or fwd"}}},
	{"policy without src and dst", policyDoc("dir: in", "peer: 1.1.1.1", "local: 2.2.2.2"), []wantErr{
		{6, "policies[0].src", "missing; set src: to a prefix"}, {6, "policies[0].dst", "missing; set dst: to a prefix"}}},
	{"bad dir", policyDoc("dir: both", "src: 10.0.0.0/8", "dst: 48.0.0.0/8", "peer: 1.1.1.1", "local: 2.2.2.2"), []wantErr{{6, "policies[0].dir", `"both" is not valid; use one of in, out or fwd`}}},
	{"bad action", policyDoc(with(tunnel, "action: drop")...), []wantErr{{11, "policies[0].action", `"drop" is not valid; use one of allow (default) or block`}}},
	{"bad offload", policyDoc(with(tunnel, "offload: crypto")...), []wantErr{{11, "policies[0].offload", `"crypto" is not valid; use one of none (default) or packet`}}},
	{"prefix with host bits", policyDoc("dir: out", "src: 10.1.2.3/8", "dst: 48.0.0.0/8", "peer: 1.1.1.1", "local: 2.2.2.2"), []wantErr{{7, "policies[0].src", `"10.1.2.3/8" has bits set after the /8; write 10.0.0.0/8`}}},
	{"prefix not an address", policyDoc("dir: out", "src: 10.0.0.0/8", "dst: any", "peer: 1.1.1.1", "local: 2.2.2.2"), []wantErr{{8, "policies[0].dst", `"any" is not an IP prefix`}}},
	{"prefix too long", policyDoc("dir: out", "src: 10.0.0.0/33", "dst: 48.0.0.0/8", "peer: 1.1.1.1", "local: 2.2.2.2"), []wantErr{{7, "policies[0].src", `"10.0.0.0/33" is not an IP prefix`}}},
	{"peer unspecified", policyDoc("dir: out", "src: 10.0.0.0/8", "dst: 48.0.0.0/8", "peer: 0.0.0.0", "local: 2.2.2.2"), []wantErr{{9, "policies[0].peer", "0.0.0.0 is the unspecified address"}}},
	{"allow without peer and local", policyDoc("dir: out", "src: 10.0.0.0/8", "dst: 48.0.0.0/8"), []wantErr{
		{6, "policies[0].peer", "missing; an allow policy sends traffic through a tunnel: set peer: to the remote tunnel endpoint, or action: block"},
		{6, "policies[0].local", "set local: to our tunnel endpoint"}}},
	{"block with tunnel", policyDoc(with(tunnel, "action: block")...), []wantErr{
		{9, "policies[0].peer", "a block policy has no tunnel; remove peer"}, {10, "policies[0].local", "remove local"}}},

	// Families.
	{"src and dst families differ", policyDoc("dir: out", "src: 10.0.0.0/8", "dst: 2001:db8::/32", "action: block"), []wantErr{{8, "policies[0].dst", "2001:db8::/32 is IPv6 but src 10.0.0.0/8 is IPv4; a selector has one address family"}}},
	{"peer family differs", policyDoc("dir: out", "src: 10.0.0.0/8", "dst: 48.0.0.0/8", "peer: 2001:db8::2", "local: 123.0.0.1"), []wantErr{{9, "policies[0].peer", "2001:db8::2 is IPv6 but the selector (src/dst) is IPv4"}}},
	{"local family differs", policyDoc("dir: in", "src: 2001:db8:1::/48", "dst: 2001:db8:2::/48", "peer: 2001:db8::2", "local: 123.0.0.1"), []wantErr{{10, "policies[0].local", "123.0.0.1 is IPv4 but the selector (src/dst) is IPv6"}}},

	// Protocols and ports.
	{"port without proto", policyDoc(with(tunnel, "dport: 443")...), []wantErr{{11, "policies[0].dport", "a port needs proto: tcp, udp, sctp or udplite"}}},
	{"port with icmp", policyDoc(with(tunnel, "proto: icmp", "sport: 8")...), []wantErr{{12, "policies[0].sport", "proto icmp has no ports"}}},
	{"port with protocol number", policyDoc(with(tunnel, "proto: 50", "dport: 1")...), []wantErr{{12, "policies[0].dport", "proto 50 has no ports"}}},
	{"port range", policyDoc(with(tunnel, "proto: udp", "sport: 1000-1999")...), []wantErr{{12, "policies[0].sport", `"1000-1999" is a range, and sluice takes a single port: an XFRM selector holds a port as one value and mask`}}},
	{"port zero", policyDoc(with(tunnel, "proto: tcp", "dport: 0")...), []wantErr{{12, "policies[0].dport", "port 0 matches nothing"}}},
	{"port too large", policyDoc(with(tunnel, "proto: tcp", "dport: 65536")...), []wantErr{{12, "policies[0].dport", "out of range; use a number from 0 to 65535"}}},
	{"port by name", policyDoc(with(tunnel, "proto: tcp", "dport: https")...), []wantErr{{12, "policies[0].dport", `want a single port number from 1 to 65535, got the string "https"`}}},
	{"proto upper case", policyDoc(with(tunnel, "proto: TCP")...), []wantErr{{11, "policies[0].proto", "protocol names are lower case; write tcp"}}},
	{"proto unknown", policyDoc(with(tunnel, "proto: esp")...), []wantErr{{11, "policies[0].proto", `want tcp, udp, icmp, icmpv6, sctp, udplite or a number from 0 to 255, got the string "esp"`}}},
	{"proto too large", policyDoc(with(tunnel, "proto: 256")...), []wantErr{{11, "policies[0].proto", "out of range; use a number from 0 to 255"}}},
	{"icmp with IPv6", policyDoc("dir: out", "src: ::/0", "dst: 2001:db8::/32", "proto: icmp", "action: block"), []wantErr{{9, "policies[0].proto", "write proto: icmpv6"}}},

	// Offload.
	{"offload-dev not an interface", policyDoc(with(tunnel, "offload: packet", "offload-dev: p1")...), []wantErr{{12, "policies[0].offload-dev", `"p1" is not one of interfaces (the interfaces are p0)`}}},
	{"packet offload without dev", policyDoc(with(tunnel, "offload: packet")...), []wantErr{{11, "policies[0].offload", "packet offload needs offload-dev"}}},
	{"offload-dev without packet", policyDoc(with(tunnel, "offload-dev: p0")...), []wantErr{{11, "policies[0].offload-dev", "only used with offload: packet"}}},
	{"fwd packet offload", policyDoc("dir: fwd", "src: 48.0.0.0/8", "dst: 10.0.0.0/8", "peer: 1.1.1.1", "local: 2.2.2.2", "offload: packet", "offload-dev: p0"), []wantErr{{11, "policies[0].offload", "fwd policies are never packet-offloaded"}}},

	// The set of policies.
	{"duplicate selector", policyDoc(with(tunnel, "priority: 1", "- dir: out", "  src: 10.0.0.0/8", "  dst: 48.0.1.0/24", "  priority: 2", "  action: block")...),
		[]wantErr{{12, "policies[1]", "same dir and selector as policies[0] (line 6)"}}},
}

func TestParseGatewayErrors(t *testing.T) {
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			g, err := ParseGateway([]byte(in), "gateway.yaml")
			if err == nil {
				t.Fatalf("no error; parsed %+v\ninput:\n%s", g, in)
			}
			if g != nil {
				t.Errorf("got a Gateway along with the error")
			}
			var ve *ValidationErrors
			if !errors.As(err, &ve) {
				t.Fatalf("error is %T, want *ValidationErrors: %v", err, err)
			}
			unmatched := append([]*FieldError(nil), ve.Errors...)
			for _, w := range tc.want {
				i := slicesIndex(unmatched, func(e *FieldError) bool {
					return e.Line == w.line && e.Path == w.path && strings.Contains(e.Msg, w.sub)
				})
				if i < 0 {
					t.Errorf("missing error at line %d, path %q, containing %q", w.line, w.path, w.sub)
					continue
				}
				unmatched = append(unmatched[:i], unmatched[i+1:]...)
			}
			for _, e := range unmatched {
				t.Errorf("unexpected error: %s", e)
			}
			if t.Failed() {
				t.Logf("input:\n%s\nall errors:\n%v", in, err)
			}
		})
	}
}

func slicesIndex(s []*FieldError, f func(*FieldError) bool) int {
	for i, e := range s {
		if f(e) {
			return i
		}
	}
	return -1
}

// The message quoted in the design brief, byte for byte.
func TestInboundForwardMessage(t *testing.T) {
	in := doc(
		"lab: false",
		"interfaces:",
		"  - name: p0",
		"    inbound: pass",
		"  - name: p1",
		"    l2: nic",
		"    inbound: forward",
	)
	_, err := ParseGateway([]byte(in), "gateway.yaml")
	want := `gateway.yaml:7: interfaces[1].inbound: "forward" needs wan-antispoof: upstream on the same interface — XDP cannot tell a packet the NIC decrypted from spoofed cleartext, so inbound forwarding is only safe where the upstream segment drops cleartext from protected prefixes; set wan-antispoof: upstream if that is true, or inbound: pass`
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}

func TestParseGatewayCollectsAllErrorsSortedByLine(t *testing.T) {
	in := doc(
		"policy-source: static", // 1: needs lab
		"lease: 1h",             // 2: out of range
		"interfaces:",
		"  - name: p0",
		"    inbound: forward", // 5: needs wan-antispoof
		"    l2: nic",
		"  - name: p0",     // 7: duplicate
		"    colour: blue", // 8: unknown key
		"policies:",
		"  - dir: out",
		"    src: 10.0.0.0/8",
		"    dst: 2001:db8::/32", // 12: family
		"    proto: icmp",
		"    dport: 80", // 14: no ports on icmp
		"    action: block",
	)
	_, err := ParseGateway([]byte(in), "gw.yaml")
	var ve *ValidationErrors
	if !errors.As(err, &ve) {
		t.Fatalf("got %v", err)
	}
	var lines []int
	for _, e := range ve.Errors {
		lines = append(lines, e.Line)
	}
	if want := []int{1, 2, 5, 7, 8, 12, 14}; !reflect.DeepEqual(lines, want) {
		t.Errorf("lines %v, want %v; errors:\n%v", lines, want, err)
	}
	printed := strings.Split(err.Error(), "\n")
	if len(printed) != len(ve.Errors) {
		t.Fatalf("Error() has %d lines for %d errors", len(printed), len(ve.Errors))
	}
	for i, l := range printed {
		if !regexp.MustCompile(`^gw\.yaml:\d+: \S`).MatchString(l) || l != ve.Errors[i].Error() {
			t.Errorf("line %d of Error(): %q", i, l)
		}
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Line != 1 || fe.Path != "policy-source" {
		t.Errorf("errors.As(*FieldError) = %+v", fe)
	}
}

func TestLoadGateway(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(path, []byte(doc("interfaces:", "  - name: p0", "    l2: fib")), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := LoadGateway(path)
	if err != nil {
		t.Fatal(err)
	}
	if g.File != path || len(g.Interfaces) != 1 || g.Interfaces[0].L2 != L2FIB {
		t.Errorf("got %+v", g)
	}

	if err := os.WriteFile(path, []byte(doc("interfaces:", "  - name: p0", "    l2: mac")), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadGateway(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+":3: interfaces[0].l2: ") {
		t.Errorf("got %v, want an error naming %s:3", err, path)
	}

	_, err = LoadGateway(filepath.Join(dir, "missing.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want fs.ErrNotExist", err)
	}
	var ve *ValidationErrors
	if errors.As(err, &ve) {
		t.Errorf("missing file reported as a validation error")
	}
}

func TestParseGatewayUnnamedInput(t *testing.T) {
	_, err := ParseGateway(nil, "")
	if err == nil || !strings.HasPrefix(err.Error(), "<input>:1: ") {
		t.Errorf("got %v", err)
	}
}

func TestProtocolString(t *testing.T) {
	for p, want := range map[Protocol]string{ProtoAny: "any", ProtoTCP: "tcp", ProtoICMPv6: "icmpv6", ProtoUDPLite: "udplite", 50: "50"} {
		if got := p.String(); got != want {
			t.Errorf("Protocol(%d).String() = %q, want %q", uint8(p), got, want)
		}
	}
}

// The examples in docs/gateway-config.md must stay valid.
func TestDocExamples(t *testing.T) {
	data, err := os.ReadFile("../../docs/gateway-config.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- example: ([a-z]+) -->\n```yaml\n(.*?)```")
	found := map[string]*Gateway{}
	for _, m := range re.FindAllSubmatch(data, -1) {
		g, err := ParseGateway(m[2], "docs example "+string(m[1]))
		if err != nil {
			t.Errorf("example %s: %v", m[1], err)
			continue
		}
		found[string(m[1])] = g
	}
	prod, lab := found["production"], found["lab"]
	if prod == nil || lab == nil {
		t.Fatalf("examples found: %v; want production and lab", found)
	}
	var names []string
	for _, i := range prod.Interfaces {
		names = append(names, i.Name)
		if i.L2 != L2NIC || i.Inbound != InboundPass {
			t.Errorf("production interface %s: l2 %s inbound %s", i.Name, i.L2, i.Inbound)
		}
	}
	if prod.PolicySource != PolicySourceKernel || prod.Lab || len(prod.Policies) != 0 ||
		!reflect.DeepEqual(names, []string{"p0", "p0.502", "p1", "p1.504"}) {
		t.Errorf("production example: %+v", prod)
	}
	if lab.PolicySource != PolicySourceStatic || !lab.Lab || len(lab.Policies) == 0 {
		t.Errorf("lab example: %+v", lab)
	}
}

// Aliases and merge keys cannot make a small file expensive: the walk has
// a budget, and going over it is one clear error.
func TestParseGatewayAliasExpansionIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("interfaces:\n  - &m0 {name: p0}\n")
	for i := 1; i < 2000; i++ {
		fmt.Fprintf(&b, "  - &m%d {l2: nic}\n", i)
	}
	b.WriteString("  - &all\n    <<: [")
	for i := 0; i < 2000; i++ {
		fmt.Fprintf(&b, "*m%d, ", i)
	}
	b.WriteString("]\n")
	for i := 0; i < 2000; i++ {
		b.WriteString("  - *all\n")
	}
	_, err := ParseGateway([]byte(b.String()), "gw.yaml")
	var ve *ValidationErrors
	if !errors.As(err, &ve) || len(ve.Errors) != 1 || !strings.Contains(ve.Errors[0].Msg, "expands through aliases and merge keys") {
		t.Errorf("got %.500v", err)
	}
}

func TestParseGatewayStopsAfterManyErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString("interfaces:\n")
	for i := 0; i < 2*maxErrors; i++ {
		b.WriteString("  - name: p0/x\n")
	}
	_, err := ParseGateway([]byte(b.String()), "gw.yaml")
	var ve *ValidationErrors
	if !errors.As(err, &ve) || len(ve.Errors) != maxErrors+1 {
		t.Fatalf("got %d errors", len(ve.Errors))
	}
	if last := ve.Errors[maxErrors]; !strings.Contains(last.Msg, "stopped after 500 problems") || last.Line != ve.Errors[maxErrors-1].Line {
		t.Errorf("last error %v", last)
	}
}

// A mapping that merges itself is not a loop.
func TestParseGatewaySelfMerge(t *testing.T) {
	g, err := ParseGateway([]byte(doc("interfaces:", "  - &a", "    name: p0", "    <<: *a")), "gw.yaml")
	if err != nil || len(g.Interfaces) != 1 || g.Interfaces[0].Name != "p0" {
		t.Errorf("got %+v, %v", g, err)
	}
}
