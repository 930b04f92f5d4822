// SPDX-License-Identifier: Apache-2.0

// Package tune turns the ConnectX-7 benchmark's host tuning script into a declarative
// profile (tune.yaml): plan prints what would change as the equivalent
// commands, apply changes only what differs (idempotent), check reports
// each drift with the live and wanted values. Kernel command line items
// (isolcpus, nohz_full, ...) are checked and reported, never edited.
package tune

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"sluice/internal/config"
	"sluice/internal/diag"
	"sluice/internal/fileread"
)

// Profile is a parsed tune.yaml.
type Profile struct {
	Sysctls map[string]string `yaml:"sysctls"`
	// THP is the transparent hugepage mode: always, madvise or never
	// (written to both enabled and defrag, as the ConnectX-7 benchmark does).
	THP string `yaml:"thp"`
	// Cmdline are kernel parameters that must be on the command line with
	// these values (checked only).
	Cmdline    map[string]string     `yaml:"cmdline"`
	Interfaces map[string]*Interface `yaml:"interfaces"`
	// DaemonCPUs are the housekeeping CPUs the gateway daemon runs on
	// (the ConnectX-7 benchmark's layout: 0-1 kernel, 2-3 daemon, the rest RX queues);
	// gateway.yaml's daemon-cpu pins it there.
	DaemonCPUs string `yaml:"daemon-cpus"`
	daemon     []int
	lines      map[string]int
	path       string
}

// Interface is one port's tuning.
type Interface struct {
	// RxQueues is the number of combined channels (ethtool -L combined).
	RxQueues int `yaml:"rx-queues"`
	// CPUs are the CPUs for the RX queue IRQs, queue i on the i-th CPU.
	CPUs         string          `yaml:"cpus"`
	Rings        *Rings          `yaml:"rings"`
	Coalesce     *Coalesce       `yaml:"coalesce"`
	Features     map[string]bool `yaml:"features"`
	PrivateFlags map[string]bool `yaml:"private-flags"`
	// RSSEqual spreads RSS over the first N queues (ethtool -X equal N).
	RSSEqual int `yaml:"rss-equal"`
	// PCIeMaxReadReq in bytes (128..4096), set with setpci.
	PCIeMaxReadReq int `yaml:"pcie-max-read-req"`
	// FlowControl is `ethtool -A` (rx/tx pause frames).
	FlowControl *FlowControl `yaml:"flow-control"`
	cpus        []int
}

type Rings struct {
	RX uint32 `yaml:"rx"`
	TX uint32 `yaml:"tx"`
}

type Coalesce struct {
	AdaptiveRX *bool   `yaml:"adaptive-rx"`
	AdaptiveTX *bool   `yaml:"adaptive-tx"`
	RXUsecs    *uint32 `yaml:"rx-usecs"`
	RXFrames   *uint32 `yaml:"rx-frames"`
	TXUsecs    *uint32 `yaml:"tx-usecs"`
	TXFrames   *uint32 `yaml:"tx-frames"`
}

// featureAliases maps `ethtool -K` short names to the feature names the
// kernel reports.
var featureAliases = map[string][]string{
	"gro":    {"rx-gro"},
	"lro":    {"rx-lro"}, // ethtool -k shows it as large-receive-offload
	"gso":    {"tx-generic-segmentation"},
	"tso":    {"tx-tcp-segmentation", "tx-tcp6-segmentation"},
	"ntuple": {"rx-ntuple-filter"},
	"rxhash": {"rx-hashing"},
	"sg":     {"tx-scatter-gather"},
	"rxvlan": {"rx-vlan-hw-parse"},
	"txvlan": {"tx-vlan-hw-insert"},
}

// featureNames expands a profile feature name to kernel feature names.
func featureNames(name string) []string {
	if a, ok := featureAliases[name]; ok {
		return a
	}
	return []string{name}
}

var mrrsValues = map[int]int{128: 0, 256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}

// Load reads and validates a profile. Errors name the file, line and
// field, and say what is allowed.
func Load(path string) (*Profile, error) {
	b, err := fileread.Read(path, fileread.ConfigLimit)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// Parse parses a profile's text (path is for messages).
func Parse(path string, b []byte) (*Profile, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p := &Profile{path: path, lines: map[string]int{}}
	index(&root, "", p.lines)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(p); err != nil {
		return nil, fmt.Errorf("%s: %w (known keys: sysctls, thp, cmdline, daemon-cpus, interfaces.NAME.{rx-queues, cpus, rings, coalesce, features, private-flags, flow-control, rss-equal, pcie-max-read-req})", path, err)
	}
	return p, p.validate()
}

// index records the line of every mapping key by its dotted path.
func index(n *yaml.Node, prefix string, lines map[string]int) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			index(c, prefix, lines)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if prefix != "" {
				k = prefix + "." + k
			}
			lines[k] = n.Content[i].Line
			index(n.Content[i+1], k, lines)
		}
	}
}

func (p *Profile) errf(field, format string, a ...any) error {
	return fmt.Errorf("%s:%d: %s: %s", p.path, p.lines[field], field, fmt.Sprintf(format, a...))
}

func (p *Profile) validate() error {
	switch p.THP {
	case "", "always", "madvise", "never":
	default:
		return p.errf("thp", "%q: want always, madvise or never", p.THP)
	}
	for k := range p.Sysctls {
		if strings.ContainsAny(k, "/ ") || strings.Contains(k, "..") || k == "" {
			return p.errf("sysctls."+k, "not a sysctl name (dotted, like net.core.busy_poll)")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(p.Interfaces)) {
		ifc := p.Interfaces[name]
		f := "interfaces." + name
		if problem := config.InterfaceNameProblem(name); problem != "" {
			return p.errf(f, "%s", problem)
		}
		if ifc == nil {
			return p.errf(f, "empty: give at least one setting")
		}
		if ifc.CPUs != "" {
			set, err := diag.ParseCPUList(ifc.CPUs)
			if err != nil {
				return p.errf(f+".cpus", "%v; want a CPU list like 4-13", err)
			}
			if len(set) == 0 {
				return p.errf(f+".cpus", "%q: want a CPU list like 4-13", ifc.CPUs)
			}
			ifc.cpus = set.Sorted()
			if ifc.RxQueues > len(ifc.cpus) {
				return p.errf(f+".cpus", "%s has %d CPUs for %d rx-queues: give one CPU per queue", ifc.CPUs, len(ifc.cpus), ifc.RxQueues)
			}
		}
		if ifc.RxQueues < 0 || ifc.RSSEqual < 0 {
			return p.errf(f, "rx-queues and rss-equal must be positive")
		}
		if ifc.RSSEqual > 0 && ifc.RxQueues > 0 && ifc.RSSEqual > ifc.RxQueues {
			return p.errf(f+".rss-equal", "%d is more than rx-queues %d", ifc.RSSEqual, ifc.RxQueues)
		}
		if _, ok := mrrsValues[ifc.PCIeMaxReadReq]; ifc.PCIeMaxReadReq != 0 && !ok {
			return p.errf(f+".pcie-max-read-req", "%d: want 128, 256, 512, 1024, 2048 or 4096", ifc.PCIeMaxReadReq)
		}
	}
	return p.validateLayout()
}

func itoa(v int) string { return strconv.Itoa(v) }
