// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"sluice/internal/fileread"
	"sluice/profiles"
)

// FCS says whether a profile's sizes count the Ethernet FCS.
const (
	FCSIncluded = "included"
	FCSExcluded = "excluded"
)

// Frame size limits on the lab's veths, without FCS: 60 bytes is a minimum
// Ethernet frame, and a live frame must fit one page with the XDP headroom
// and tailroom, so 3520 is the largest the generator can build (9000-byte
// jumbo frames would need multi-buffer live frames, which the kernel lacks).
const (
	MinFrame = 60
	MaxFrame = 3520
	fcsLen   = 4
)

// Profile is a traffic profile: frame sizes with their share of packets,
// and the flows the packets are spread over.
type Profile struct {
	Name        string          `yaml:"name" json:"name"`
	Description string          `yaml:"description" json:"description"`
	FCS         string          `yaml:"fcs" json:"fcs"`
	Streams     []ProfileStream `yaml:"streams" json:"streams"`
	Flows       Flows           `yaml:"flows" json:"flows"`
	// Source is where the profile was read from.
	Source string `yaml:"-" json:"source"`
}

// ProfileStream is one frame size. Its share of packets is Weight, or PPS
// (a rate measured somewhere, used as a weight), whichever is given.
type ProfileStream struct {
	Size   int     `yaml:"size" json:"size"`
	Weight float64 `yaml:"weight,omitempty" json:"weight,omitempty"`
	PPS    float64 `yaml:"pps,omitempty" json:"pps,omitempty"`
}

// Flows are the field ranges (like TRex's field engine): consecutive source
// addresses, a few hosts behind every tunnel of the lab, and port ranges.
// Spread says how sources meet destinations: all-pairs (every source sends
// to every destination) or per-client (source i sends only to destination
// i mod the destination count: seed 002's N clients spread over T tunnels,
// src-count host pairs in all).
type Flows struct {
	Spread     string `yaml:"spread,omitempty" json:"spread,omitempty"`
	Src        string `yaml:"src" json:"src"`
	SrcCount   int    `yaml:"src-count" json:"src_count"`
	DstHosts   int    `yaml:"dst-hosts" json:"dst_hosts"`
	SPort      int    `yaml:"sport" json:"sport"`
	SPortCount int    `yaml:"sport-count" json:"sport_count"`
	DPort      int    `yaml:"dport" json:"dport"`
	DPortCount int    `yaml:"dport-count" json:"dport_count"`
}

// Flows.Spread values.
const (
	SpreadAllPairs  = "all-pairs"
	SpreadPerClient = "per-client"
)

// FrameLen is a stream's frame length on veth (without FCS).
func (p *Profile) FrameLen(s ProfileStream) int {
	if p.FCS == FCSIncluded {
		return s.Size - fcsLen
	}
	return s.Size
}

// Shares returns each stream's share of packets (sums to 1).
func (p *Profile) Shares() []float64 {
	total := sumShares(p.Streams)
	out := make([]float64, len(p.Streams))
	for i, s := range p.Streams {
		out[i] = s.share() / total
	}
	return out
}

func sumShares(streams []ProfileStream) float64 {
	var total float64
	for _, s := range streams {
		total += s.share()
	}
	return total
}

func (s ProfileStream) share() float64 {
	if s.Weight > 0 {
		return s.Weight
	}
	return s.PPS
}

// MeanFrame is the average frame length with FCS, over the mix.
func (p *Profile) MeanFrame() float64 {
	var m float64
	for i, sh := range p.Shares() {
		m += sh * float64(p.FrameLen(p.Streams[i])+fcsLen)
	}
	return m
}

// ListProfiles names the built-in profiles.
func ListProfiles() []string {
	var out []string
	entries, _ := fs.ReadDir(profiles.FS, ".")
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// LoadProfile finds a profile by built-in name (imix-mno-1, fixed-64...),
// by the pattern fixed-N (N = frame size with FCS, 64-3524), or as a file
// path.
func LoadProfile(name string) (*Profile, error) {
	if b, err := profiles.FS.ReadFile(name + ".yaml"); err == nil {
		return ParseProfile(b, "builtin:"+name)
	}
	if n, ok := strings.CutPrefix(name, "fixed-"); ok && !strings.ContainsAny(name, "/.") {
		size, err := strconv.Atoi(n)
		if err != nil || size < MinFrame+fcsLen || size > MaxFrame+fcsLen {
			return nil, fmt.Errorf("--profile %s: a fixed size is 64 to %d bytes (with FCS); 9000-byte frames would need multi-buffer live frames, which the kernel's BPF_PROG_RUN lacks", name, MaxFrame+fcsLen)
		}
		return &Profile{Name: name, Description: fmt.Sprintf("Fixed %d-byte frames (size includes the FCS)", size),
			FCS: FCSIncluded, Streams: []ProfileStream{{Size: size, Weight: 1}}, Flows: defaultFlows(), Source: "builtin:fixed-N"}, nil
	}
	b, err := fileread.Read(name, fileread.ConfigLimit)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !strings.ContainsAny(name, "/.") {
			return nil, fmt.Errorf("--profile %s: no such built-in profile or file; built-in: %s, or fixed-N", name, strings.Join(ListProfiles(), ", "))
		}
		return nil, fmt.Errorf("--profile: %w", err)
	}
	return ParseProfile(b, name)
}

func defaultFlows() Flows {
	return Flows{Spread: SpreadAllPairs, Src: "16.0.0.1", SrcCount: 256, DstHosts: 4, SPort: 1024, SPortCount: 64, DPort: 5001, DPortCount: 1}
}

// ParseProfile reads a profile file. Errors name the file, the field and
// the fix.
func ParseProfile(b []byte, source string) (*Profile, error) {
	p := &Profile{Source: source}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(p); err != nil {
		return nil, fmt.Errorf("%s: %v", source, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var errs []string
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Sprintf("%s: %s: %s", source, field, fmt.Sprintf(format, a...)))
	}
	if p.Name == "" {
		bad("name", "missing; give the profile a name (it labels the runs)")
	}
	switch p.FCS {
	case FCSIncluded, FCSExcluded:
	case "":
		bad("fcs", "missing; say whether sizes include the 4-byte FCS: included or excluded")
	default:
		bad("fcs", "%q is not included or excluded", p.FCS)
	}
	if len(p.Streams) == 0 {
		bad("streams", "missing; list at least one {size: N, weight: W}")
	}
	if len(p.Streams) > maxEntries {
		bad("streams", "%d streams; at most %d", len(p.Streams), maxEntries)
	}
	for i, s := range p.Streams {
		f := fmt.Sprintf("streams[%d]", i)
		if p.FCS != "" {
			if l := p.FrameLen(s); l < MinFrame || l > MaxFrame {
				lo, hi := MinFrame, MaxFrame
				if p.FCS == FCSIncluded {
					lo, hi = lo+fcsLen, hi+fcsLen
				}
				bad(f+".size", "%d is outside %d-%d (fcs: %s)", s.Size, lo, hi, p.FCS)
			}
		}
		switch {
		case !(s.Weight >= 0) || !(s.PPS >= 0) || math.IsInf(s.Weight+s.PPS, 0): // NaN fails >= 0
			bad(f, "weight and pps must be finite numbers, not negative")
		case s.Weight > 0 && s.PPS > 0:
			bad(f, "give weight or pps, not both")
		case s.Weight == 0 && s.PPS == 0:
			bad(f, "missing weight (or pps): the stream's share of packets")
		}
	}
	if total := sumShares(p.Streams); math.IsInf(total, 0) {
		bad("streams", "the weights (or pps) add up to more than a float holds; scale them down, only their proportions count")
	}
	fl := &p.Flows
	d := defaultFlows()
	if fl.Src == "" {
		fl.Src = d.Src
	}
	if a, err := netip.ParseAddr(fl.Src); err != nil || !a.Is4() {
		bad("flows.src", "%q is not an IPv4 address", fl.Src)
	}
	for _, c := range []struct {
		name string
		v    *int
		def  int
		max  int
	}{
		{"flows.src-count", &fl.SrcCount, d.SrcCount, 1 << 24},
		{"flows.dst-hosts", &fl.DstHosts, d.DstHosts, 254},
		{"flows.sport-count", &fl.SPortCount, d.SPortCount, 65535},
		{"flows.dport-count", &fl.DPortCount, d.DPortCount, 65535},
	} {
		if *c.v == 0 {
			*c.v = c.def
		}
		if *c.v < 1 || *c.v > c.max {
			bad(c.name, "%d is outside 1-%d", *c.v, c.max)
		}
	}
	switch fl.Spread {
	case "":
		fl.Spread = SpreadAllPairs
	case SpreadAllPairs, SpreadPerClient:
	default:
		bad("flows.spread", "%q is not all-pairs (every source to every destination) or per-client (source i to destination i only)", fl.Spread)
	}
	if fl.SPort == 0 {
		fl.SPort = d.SPort
	}
	if fl.DPort == 0 {
		fl.DPort = d.DPort
	}
	if fl.SPort+fl.SPortCount-1 > 65535 || fl.SPort < 0 {
		bad("flows.sport", "%d + sport-count %d runs past 65535", fl.SPort, fl.SPortCount)
	}
	if fl.DPort+fl.DPortCount-1 > 65535 || fl.DPort < 0 {
		bad("flows.dport", "%d + dport-count %d runs past 65535", fl.DPort, fl.DPortCount)
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n"))
	}
	return p, nil
}
