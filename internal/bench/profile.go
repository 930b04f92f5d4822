// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"sluice/internal/fileread"
	"sluice/internal/yamldoc"
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
	Name        string          `json:"name"`
	Description string          `json:"description"`
	FCS         string          `json:"fcs"`
	Streams     []ProfileStream `json:"streams"`
	Flows       Flows           `json:"flows"`
	// Source is where the profile was read from.
	Source string `json:"source"`
}

// ProfileStream is one frame size. Its share of packets is Weight, or PPS
// (a rate measured somewhere, used as a weight), whichever is given.
type ProfileStream struct {
	Size   int     `json:"size"`
	Weight float64 `json:"weight,omitempty"`
	PPS    float64 `json:"pps,omitempty"`
}

// Flows are the field ranges (like TRex's field engine): consecutive source
// addresses, a few hosts behind every tunnel of the lab, and port ranges.
// Spread says how sources meet destinations: all-pairs (every source sends
// to every destination) or per-client (source i sends only to destination
// i mod the destination count: seed 002's N clients spread over T tunnels,
// src-count host pairs in all).
type Flows struct {
	Spread     string `json:"spread,omitempty"`
	Src        string `json:"src"`
	SrcCount   int    `json:"src_count"`
	DstHosts   int    `json:"dst_hosts"`
	SPort      int    `json:"sport"`
	SPortCount int    `json:"sport_count"`
	DPort      int    `json:"dport"`
	DPortCount int    `json:"dport_count"`
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
		// Written as a file would be, so its flows are the defaults of
		// profile_file.go like any file's.
		return ParseProfile(fmt.Appendf(nil, "name: %s\ndescription: Fixed %d-byte frames (size includes the FCS)\nfcs: %s\nstreams: [{size: %d, weight: 1}]\n",
			name, size, FCSIncluded, size), "builtin:fixed-N")
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

// ParseProfile reads a profile file (source names it in messages). It is
// read as gateway.yaml is (yamldoc): every problem at once, each as
// source:line: field: what is wrong; the fix.
func ParseProfile(b []byte, source string) (*Profile, error) {
	d := yamldoc.New(source, len(b))
	var f profileFile
	p := &Profile{Source: source}
	root := d.Read(b, "a profile needs name:, fcs: and streams: (see docs/bench.md)", "name:, fcs: and streams:", &f, p)
	if root != nil {
		p.check(d, yamldoc.Item{Line: root.Line})
	}
	if err := d.Result(); err != nil {
		return nil, err
	}
	return p, nil
}

// check runs the checks that combine keys (root is the document's
// mapping), skipping a key already reported on its own.
func (p *Profile) check(d *yamldoc.Parser, root yamldoc.Item) {
	if p.Name == "" && !d.Bad["name"] {
		d.Missing(root, "name", "give the profile a name (it labels the runs)")
	}
	if !d.Given["fcs"] {
		d.Missing(root, "fcs", "say whether sizes include the 4-byte FCS: included or excluded")
	}
	switch n := d.Counts["streams"]; {
	case n == 0 && !d.Bad["streams"]:
		d.Missing(root, "streams", "list at least one {size: N, weight: W}")
	case n > maxEntries:
		d.ErrAt(root, "streams", "%d streams; at most %d", n, maxEntries)
	}
	for i, it := range d.ItemsOf("streams", len(p.Streams)) {
		s := p.Streams[i]
		if p.FCS != "" {
			if l := p.FrameLen(s); l < MinFrame || l > MaxFrame {
				lo, hi := MinFrame, MaxFrame
				if p.FCS == FCSIncluded {
					lo, hi = lo+fcsLen, hi+fcsLen
				}
				d.ErrAt(it, "size", "%d is outside %d-%d (fcs: %s)", s.Size, lo, hi, p.FCS)
			}
		}
		switch {
		case d.Bad[it.Path+".weight"] || d.Bad[it.Path+".pps"]:
		case s.Weight > 0 && s.PPS > 0:
			d.Errorf(it.Line, it.Path, "give weight or pps, not both")
		case s.Weight == 0 && s.PPS == 0:
			d.Errorf(it.Line, it.Path, "missing weight (or pps): the stream's share of packets")
		}
	}
	if total := sumShares(p.Streams); math.IsInf(total, 0) {
		d.ErrAt(root, "streams", "the weights (or pps) add up to more than a float holds; scale them down, only their proportions count")
	}
	fl, flows := p.Flows, d.ItemAt("flows")
	if fl.SPort+fl.SPortCount-1 > 65535 && !d.Bad["flows.sport"] && !d.Bad["flows.sport-count"] {
		d.ErrAt(flows, "sport", "%d + sport-count %d runs past 65535", fl.SPort, fl.SPortCount)
	}
	if fl.DPort+fl.DPortCount-1 > 65535 && !d.Bad["flows.dport"] && !d.Bad["flows.dport-count"] {
		d.ErrAt(flows, "dport", "%d + dport-count %d runs past 65535", fl.DPort, fl.DPortCount)
	}
}
