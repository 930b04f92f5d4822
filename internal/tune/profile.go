// SPDX-License-Identifier: Apache-2.0

// Package tune turns the ConnectX-7 benchmark's host tuning script into a declarative
// profile (tune.yaml): plan prints what would change as the equivalent
// commands, apply changes only what differs (idempotent), check reports
// each drift with the live and wanted values. Kernel command line items
// (isolcpus, nohz_full, ...) are checked and reported, never edited.
package tune

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"sluice/internal/config"
	"sluice/internal/diag"
	"sluice/internal/fileread"
	"sluice/internal/yamldoc"
)

// Profile is a parsed tune.yaml (its keys are declared once, on
// tuneFile in profile_file.go).
type Profile struct {
	Sysctls map[string]string
	// THP is the transparent hugepage mode: always, madvise or never
	// (written to both enabled and defrag, as the ConnectX-7 benchmark does).
	THP string
	// Cmdline are kernel parameters that must be on the command line with
	// these values (checked only).
	Cmdline    map[string]string
	Interfaces map[string]*Interface
	// DaemonCPUs are the housekeeping CPUs the gateway daemon runs on
	// (the ConnectX-7 benchmark's layout: 0-1 kernel, 2-3 daemon, the rest RX queues);
	// gateway.yaml's daemon-cpu pins it there.
	DaemonCPUs string
	daemon     []int
	// lines holds the line of every key by its path (interfaces.p0.cpus),
	// for the checks that combine keys.
	lines map[string]int
	path  string
}

// Interface is one port's tuning.
type Interface struct {
	// RxQueues is the number of combined channels (ethtool -L combined).
	RxQueues int
	// CPUs are the CPUs for the RX queue IRQs, queue i on the i-th CPU.
	CPUs         string
	Rings        *Rings
	Coalesce     *Coalesce
	Features     map[string]bool
	PrivateFlags map[string]bool
	// RSSEqual spreads RSS over the first N queues (ethtool -X equal N).
	RSSEqual int
	// PCIeMaxReadReq in bytes (128..4096), set with setpci.
	PCIeMaxReadReq int
	// FlowControl is `ethtool -A` (rx/tx pause frames).
	FlowControl *FlowControl
	cpus        []int
}

// Rings are `ethtool -G` ring sizes; 0 leaves one as it is.
type Rings struct {
	RX uint32
	TX uint32
}

// Coalesce is `ethtool -C`; nil leaves a setting as it is.
type Coalesce struct {
	AdaptiveRX *bool
	AdaptiveTX *bool
	RXUsecs    *uint32
	RXFrames   *uint32
	TXUsecs    *uint32
	TXFrames   *uint32
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

// Parse parses a profile's text (path is for messages). Every problem of
// a single key is reported (yamldoc: file:line: field: what is wrong; the
// fix); then the first problem of the checks that combine keys.
func Parse(path string, b []byte) (*Profile, error) {
	d := yamldoc.New(path, len(b))
	var f tuneFile
	p := &Profile{path: path}
	d.Read(b, "a profile needs at least one of sysctls:, thp:, cmdline: or interfaces: (see docs/tune.md)", "sysctls: and interfaces:", &f, p)
	if err := d.Result(); err != nil {
		return nil, err
	}
	p.lines = d.Lines
	return p, p.validate()
}

// errf is a problem found by the checks that combine keys, at field's
// line.
func (p *Profile) errf(field, format string, a ...any) error {
	return &yamldoc.FieldError{File: p.path, Line: p.lines[field], Path: field, Msg: fmt.Sprintf(format, a...)}
}

func (p *Profile) validate() error {
	for k := range p.Sysctls {
		if strings.ContainsAny(k, "/ ") || strings.Contains(k, "..") || k == "" {
			return p.errf(yamldoc.KeyPath("sysctls", k), "not a sysctl name (dotted, like net.core.busy_poll)")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(p.Interfaces)) {
		ifc := p.Interfaces[name]
		f := yamldoc.KeyPath("interfaces", name)
		if problem := config.InterfaceNameProblem(name); problem != "" {
			return p.errf(f, "%s", problem)
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
		if ifc.RSSEqual > 0 && ifc.RxQueues > 0 && ifc.RSSEqual > ifc.RxQueues {
			return p.errf(f+".rss-equal", "%d is more than rx-queues %d", ifc.RSSEqual, ifc.RxQueues)
		}
	}
	return p.validateLayout()
}

func itoa(v int) string { return strconv.Itoa(v) }
