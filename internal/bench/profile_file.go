// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"net/netip"

	"go.yaml.in/yaml/v3"

	"sluice/internal/yamldoc"
)

// profileFile is a traffic profile as written: every key of the file is
// declared here, once (docs/bench.md describes them), with its default,
// and yamldoc reads it as it reads gateway.yaml. ParseProfile fills
// Profile from it by field name.
type profileFile struct {
	Name        yamldoc.Text `yaml:"name"`
	Description yamldoc.Text `yaml:"description"`
	FCS         fcsMode      `yaml:"fcs"`
	Streams     []streamFile `yaml:"streams" what:"stream" example:"{size: 64, weight: 1}"`
	Flows       flowsFile    `yaml:"flows" default:"{}" example:"src-count: 256"`
}

// streamFile is one entry of streams: (filled into ProfileStream).
type streamFile struct {
	Size   yamldoc.Num[yamldoc.MaxU16] `yaml:"size"`
	Weight yamldoc.Float               `yaml:"weight"`
	PPS    yamldoc.Float               `yaml:"pps"`
}

// flowsFile is flows: (filled into Flows); every key has its default
// here, and flows: itself defaults to all of them.
type flowsFile struct {
	Spread     yamldoc.Str[spreadRule] `yaml:"spread" default:"all-pairs"`
	Src        yamldoc.Str[ipv4Rule]   `yaml:"src" default:"16.0.0.1"`
	SrcCount   yamldoc.Num[srcCount]   `yaml:"src-count" default:"256"`
	DstHosts   yamldoc.Num[dstHosts]   `yaml:"dst-hosts" default:"4"`
	SPort      yamldoc.Num[portRule]   `yaml:"sport" default:"1024"`
	SPortCount yamldoc.Num[portRule]   `yaml:"sport-count" default:"64"`
	DPort      yamldoc.Num[portRule]   `yaml:"dport" default:"5001"`
	DPortCount yamldoc.Num[portRule]   `yaml:"dport-count" default:"1"`
}

// fcsMode is fcs: whether sizes count the Ethernet FCS.
type fcsMode string

func (m *fcsMode) UnmarshalYAML(n *yaml.Node) error {
	return yamldoc.OneOf(n, m, FCSIncluded, FCSExcluded)
}

// spreadRule is spread: how sources meet destinations.
type spreadRule struct{}

func (spreadRule) Want() string { return "all-pairs or per-client" }
func (spreadRule) Check(s string) (string, string) {
	if s == SpreadAllPairs || s == SpreadPerClient {
		return s, ""
	}
	return "", fmt.Sprintf("%q is not all-pairs (every source to every destination) or per-client (source i to destination i only)", s)
}

// ipv4Rule is src: the first source address.
type ipv4Rule struct{}

func (ipv4Rule) Want() string { return "an IPv4 address such as 16.0.0.1" }
func (ipv4Rule) Check(s string) (string, string) {
	if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
		return s, ""
	}
	return "", fmt.Sprintf("%q is not an IPv4 address; write one such as 16.0.0.1", s)
}

// The counts and ports start at 1.
type (
	srcCount struct{ yamldoc.From1 }
	dstHosts struct{ yamldoc.From1 }
	portRule struct{ yamldoc.From1 }
)

func (srcCount) Max() uint64 { return 1 << 24 }
func (dstHosts) Max() uint64 { return 254 }
func (portRule) Max() uint64 { return 65535 }
