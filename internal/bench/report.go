// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"sluice/internal/lab"
)

// SchemaID names the report format; docs/bench.md describes it and
// report.schema.json is its JSON Schema.
const SchemaID = "https://sluice.dev/schemas/bench-report-1.json"

// ReportSchema is the JSON Schema of report.json.
//
//go:embed report.schema.json
var ReportSchema []byte

// Report is report.json: one or more runs with the same settings.
type Report struct {
	Schema   string       `json:"$schema"`
	Created  time.Time    `json:"created"`
	Command  string       `json:"command"`
	Version  string       `json:"sluice_version"`
	Host     Host         `json:"host"`
	Kind     string       `json:"kind"` // run, compare, ndr, pdr
	Notes    []string     `json:"notes"`
	Settings Settings     `json:"settings"`
	Runs     []*RunResult `json:"runs"`
}

// Host says where the numbers were measured.
type Host struct {
	Kernel   string `json:"kernel"`
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpu_model"`
	Hostname string `json:"hostname"`
}

// Settings are the load settings shared by the runs.
type Settings struct {
	Profile     *Profile `json:"profile"`
	Steps       int      `json:"steps"`
	StepSeconds float64  `json:"step_seconds"`
	RateMax     Rate     `json:"rate_max"`
	// Ramp is set with --rate-max auto (RateMax is then 0 and Steps
	// bounds the ramp's rising steps).
	Ramp          *Ramp   `json:"ramp,omitempty"`
	LossThreshold float64 `json:"loss_threshold_pct"`
	GenCPUs       []int   `json:"gen_cpus"`
	Search        string  `json:"search,omitempty"`
}

// RunResult is one run: one forwarder, every step.
type RunResult struct {
	Label string `json:"label"`
	// Round (1-based) of a compare with --rounds > 1; 0 otherwise.
	Round         int     `json:"round,omitempty"`
	Forwarder     string  `json:"forwarder"`
	Topology      string  `json:"topology"`
	Tunnels       int     `json:"tunnels"`
	Profile       string  `json:"profile"`
	RateMax       Rate    `json:"rate_max"`
	Ramp          *Ramp   `json:"ramp,omitempty"`
	GenCPUs       []int   `json:"gen_cpus"`
	LossThreshold float64 `json:"loss_threshold_pct"`
	Steps         []Step  `json:"steps"`
	// MaxClean is the index (1-based) of the clean step with the highest
	// received rate; 0 when no step was clean.
	MaxClean  int    `json:"max_clean_step"`
	TotalTx   uint64 `json:"total_tx_packets"`
	TotalRx   uint64 `json:"total_rx_packets"`
	TotalLost uint64 `json:"total_lost_packets"`
	// Search is the result of an NDR/PDR search (kind ndr or pdr).
	Search *SearchResult `json:"search,omitempty"`
	// Ceiling says what set MaxClean: the forwarder, the generator or
	// nothing (the load's top); nil for a run without steps.
	Ceiling *Ceiling `json:"ceiling,omitempty"`

	kernelFwdBase uint64
}

// MaxCleanStep returns the max-clean step, or nil.
func (r *RunResult) MaxCleanStep() *Step {
	for i := range r.Steps {
		if r.Steps[i].Index == r.MaxClean {
			return &r.Steps[i]
		}
	}
	return nil
}

// Step is one load step. Rates are per second over the step's duration;
// bits count the Ethernet frame with its 4-byte FCS (L2), not preamble and
// inter-frame gap.
type Step struct {
	Index     int     `json:"index"`
	StartS    float64 `json:"start_s"`
	DurationS float64 `json:"duration_s"`
	TargetPPS float64 `json:"target_pps"`
	TargetBPS float64 `json:"target_bps"`
	TxPackets uint64  `json:"tx_packets"`
	RxPackets uint64  `json:"rx_packets"`
	Lost      uint64  `json:"lost_packets"`
	TxBytes   uint64  `json:"tx_bytes"`
	RxBytes   uint64  `json:"rx_bytes"`
	TxPPS     float64 `json:"tx_pps"`
	RxPPS     float64 `json:"rx_pps"`
	TxBPS     float64 `json:"tx_bps"`
	RxBPS     float64 `json:"rx_bps"`
	LossPct   float64 `json:"loss_pct"`
	// Late counts frames that arrived after a higher sequence number of
	// their stream (reordering); TsBackwards in-order frames stamped
	// earlier than their predecessor (must be 0).
	Late        uint64  `json:"late_packets"`
	TsBackwards uint64  `json:"ts_backwards"`
	Latency     Latency `json:"latency"`
	Clean       bool    `json:"clean"`
	// GenLimited: the generator sent less than 97% of the target.
	GenLimited bool `json:"generator_limited"`
	// KernelForwarded is how many datagrams the forwarding namespaces'
	// kernels forwarded during the step (ForwDatagrams): near 0 when an
	// XDP forwarder carries the traffic.
	KernelForwarded uint64       `json:"kernel_forwarded"`
	Streams         []StreamStep `json:"streams"`
}

// StreamStep is one profile entry (frame size) in a step, over all
// generator CPUs.
type StreamStep struct {
	Entry     int     `json:"entry"`
	Size      int     `json:"size"`
	FrameLen  int     `json:"frame_len"`
	Share     float64 `json:"share"`
	TxPackets uint64  `json:"tx_packets"`
	RxPackets uint64  `json:"rx_packets"`
	Lost      uint64  `json:"lost_packets"`
	LossPct   float64 `json:"loss_pct"`
	Late      uint64  `json:"late_packets"`
	Latency   Latency `json:"latency"`

	hist []uint64
}

// Latency is one-way latency from the generator's stamp to the sink, in
// microseconds. Percentiles come from a histogram of 1/16 octave.
type Latency struct {
	MinUs  float64 `json:"min_us"`
	MeanUs float64 `json:"mean_us"`
	P50Us  float64 `json:"p50_us"`
	P99Us  float64 `json:"p99_us"`
	P999Us float64 `json:"p999_us"`
	MaxUs  float64 `json:"max_us"`
}

// VethNote is said in every report whose runs go over veth.
const VethNote = "On veth nothing encrypts: the lab's gateways forward cleartext, and sluice's fast path forwards what the kernel would have sent through a packet-offloaded SA. On a packet-offload NIC the NIC encrypts at line rate; these numbers measure the forwarding path only."

// NewReport starts a report for the current host.
func NewReport(kind, command, version string, s Settings) *Report {
	var uts unix.Utsname
	unix.Uname(&uts)
	host, _ := os.Hostname()
	return &Report{
		Schema: SchemaID, Created: time.Now().UTC().Truncate(time.Second), Command: command, Version: version,
		Host: Host{Kernel: unix.ByteSliceToString(uts.Release[:]), CPUs: runtime.NumCPU(), CPUModel: cpuModel(), Hostname: host},
		Kind: kind, Settings: s, Runs: []*RunResult{},
		Notes: []string{VethNote},
	}
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// WriteDir writes report.json, steps.csv, the plots (PNG and SVG) and
// report.html into dir.
func (r *Report) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var csvBuf bytes.Buffer
	if err := r.WriteCSV(&csvBuf); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "steps.csv"), csvBuf.Bytes(), 0o644); err != nil {
		return err
	}
	charts, err := r.Charts()
	if err != nil {
		return err
	}
	for _, c := range charts {
		if err := os.WriteFile(filepath.Join(dir, c.Name+".svg"), c.SVG, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, c.Name+".png"), c.PNG, 0o644); err != nil {
			return err
		}
	}
	html, err := r.HTML(charts)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.html"), html, 0o644)
}

// CSVHeader is the first line of steps.csv.
var CSVHeader = []string{"run", "forwarder", "topology", "tunnels", "profile", "step", "start_s", "duration_s",
	"target_pps", "tx_pps", "rx_pps", "tx_bps", "rx_bps", "tx_packets", "rx_packets", "lost_packets", "loss_pct",
	"late_packets", "lat_min_us", "lat_mean_us", "lat_p50_us", "lat_p99_us", "lat_p999_us", "lat_max_us",
	"clean", "max_clean", "generator_limited", "kernel_forwarded"}

// WriteCSV writes one line per step of every run.
func (r *Report) WriteCSV(w interface{ Write([]byte) (int, error) }) error {
	cw := csv.NewWriter(w)
	cw.Write(CSVHeader)
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	for _, run := range r.Runs {
		for _, s := range run.Steps {
			cw.Write([]string{run.Label, run.Forwarder, run.Topology, strconv.Itoa(run.Tunnels), run.Profile,
				strconv.Itoa(s.Index), f(round(s.StartS, 3)), f(round(s.DurationS, 3)),
				f(round(s.TargetPPS, 0)), f(round(s.TxPPS, 0)), f(round(s.RxPPS, 0)), f(round(s.TxBPS, 0)), f(round(s.RxBPS, 0)),
				u(s.TxPackets), u(s.RxPackets), u(s.Lost), f(round(s.LossPct, 4)), u(s.Late),
				f(round(s.Latency.MinUs, 3)), f(round(s.Latency.MeanUs, 3)), f(round(s.Latency.P50Us, 3)), f(round(s.Latency.P99Us, 3)),
				f(round(s.Latency.P999Us, 3)), f(round(s.Latency.MaxUs, 3)),
				strconv.FormatBool(s.Clean), strconv.FormatBool(s.Index == run.MaxClean), strconv.FormatBool(s.GenLimited), u(s.KernelForwarded)})
		}
	}
	cw.Flush()
	return cw.Error()
}

func round(v float64, digits int) float64 {
	p := 1.0
	for i := 0; i < digits; i++ {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}

// readForwDatagrams reads Ip ForwDatagrams of a namespace.
func readForwDatagrams(ns string) uint64 {
	var n uint64
	lab.DoIn(ns, func() error {
		// thread-self: /proc/net follows the main thread's namespace
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		var header []string
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || f[0] != "Ip:" {
				continue
			}
			if header == nil {
				header = f
				continue
			}
			for i, h := range header {
				if h == "ForwDatagrams" && i < len(f) {
					n, _ = strconv.ParseUint(f[i], 10, 64)
				}
			}
		}
		return nil
	})
	return n
}

// Summary is one line of a compare table. With several rounds it stands
// for one forwarder: rates and latency are medians over its rounds, the
// ratio is the median of the per-round ratios (each run against the
// reference's run of the same round, measured minutes rather than rounds
// apart), and RatioMin/RatioMax give their spread.
type Summary struct {
	Label        string  `json:"label"`
	Rounds       int     `json:"rounds"`
	MaxCleanPPS  float64 `json:"max_clean_pps"`
	MaxCleanBPS  float64 `json:"max_clean_bps"`
	PeakRxPPS    float64 `json:"peak_rx_pps"`
	RatioToFirst float64 `json:"ratio_to_first"`
	RatioMin     float64 `json:"ratio_min"`
	RatioMax     float64 `json:"ratio_max"`
	P99AtClean   float64 `json:"p99_us_at_max_clean"`
	// Limits counts the line's runs by what set their max-clean rate
	// (Ceiling.Limit: forwarder, generator, none).
	Limits map[string]int `json:"limits"`
	// Ratios is how many per-round ratios RatioToFirst comes from;
	// RatiosByGenerator how many of them had a number the generator set
	// on either side (this run's or the reference's), RatiosByTop how
	// many of the rest had one the load's top set (no limit reached).
	Ratios            int `json:"ratios"`
	RatiosByGenerator int `json:"ratios_by_generator"`
	RatiosByTop       int `json:"ratios_by_top"`
}

// LimitText says what set the line's numbers, e.g. "forwarder 2/3,
// generator 1/3" (a single run: "forwarder").
func (s Summary) LimitText() string {
	var parts []string
	for _, l := range []string{LimitForwarder, LimitGenerator, LimitNone} {
		if n := s.Limits[l]; n > 0 {
			if s.Rounds == 1 {
				return l
			}
			parts = append(parts, fmt.Sprintf("%s %d/%d", l, n, s.Rounds))
		}
	}
	return strings.Join(parts, ", ")
}

// RatioNote says when the ratio was not set by the two forwarders alone;
// "" when it was (or the line is the reference).
func (s Summary) RatioNote() string {
	var parts []string
	if s.RatiosByGenerator > 0 {
		parts = append(parts, fmt.Sprintf("set by the generator, not the forwarders, in %d of %d %s", s.RatiosByGenerator, s.Ratios, plural(s.Ratios, "round", "rounds")))
	}
	if s.RatiosByTop > 0 {
		parts = append(parts, fmt.Sprintf("set by the load's top (no limit reached), not the forwarders, in %d of %d %s", s.RatiosByTop, s.Ratios, plural(s.Ratios, "round", "rounds")))
	}
	return strings.Join(parts, "; ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Summaries returns one line per run, or per forwarder when the runs are
// rounds of a compare; ratios are to the first line (the kernel in a
// compare).
func (r *Report) Summaries() []Summary {
	type group struct {
		label string
		runs  []*RunResult
	}
	var groups []*group
	byKey := map[string]*group{}
	for i, run := range r.Runs {
		key, label := "#"+strconv.Itoa(i), run.Label
		if run.Round > 0 {
			key, label = "fwd "+run.Forwarder, run.Forwarder
		}
		g := byKey[key]
		if g == nil {
			g = &group{label: label}
			byKey[key] = g
			groups = append(groups, g)
		}
		g.runs = append(g.runs, run)
	}
	// the reference's run per round
	ref := map[int]*RunResult{}
	if len(groups) > 0 {
		for _, run := range groups[0].runs {
			ref[run.Round] = run
		}
	}
	var out []Summary
	for gi, g := range groups {
		s := Summary{Label: g.label, Rounds: len(g.runs), Limits: map[string]int{}}
		var pps, bps, p99, ratios []float64
		for _, run := range g.runs {
			if st := run.MaxCleanStep(); st != nil {
				pps, bps, p99 = append(pps, st.RxPPS), append(bps, st.RxBPS), append(p99, st.Latency.P99Us)
			} else {
				pps, bps, p99 = append(pps, 0), append(bps, 0), append(p99, 0)
			}
			for _, st := range run.Steps {
				s.PeakRxPPS = max(s.PeakRxPPS, st.RxPPS)
			}
			if run.Ceiling != nil {
				s.Limits[run.Ceiling.Limit]++
			}
			refRun := ref[run.Round]
			if refRun == nil || maxCleanPPS(refRun) <= 0 {
				continue
			}
			ratios = append(ratios, maxCleanPPS(run)/maxCleanPPS(refRun))
			if gi == 0 {
				continue // the reference against itself
			}
			s.Ratios++
			switch {
			case limitIs(run, LimitGenerator) || limitIs(refRun, LimitGenerator):
				s.RatiosByGenerator++
			case limitIs(run, LimitNone) || limitIs(refRun, LimitNone):
				s.RatiosByTop++
			}
		}
		s.MaxCleanPPS, s.MaxCleanBPS, s.P99AtClean = median(pps), median(bps), median(p99)
		if len(ratios) > 0 {
			s.RatioToFirst = median(ratios)
			s.RatioMin, s.RatioMax = slices.Min(ratios), slices.Max(ratios)
		}
		out = append(out, s)
	}
	return out
}

func limitIs(run *RunResult, limit string) bool {
	return run.Ceiling != nil && run.Ceiling.Limit == limit
}

func maxCleanPPS(run *RunResult) float64 {
	if st := run.MaxCleanStep(); st != nil {
		return st.RxPPS
	}
	return 0
}

// median of v (the mean of the middle two for an even count); 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// FormatPPS and FormatBPS print rates for people.
func FormatPPS(v float64) string { return humanRate(v, "pps") }

// FormatBPS prints a bit rate for people.
func FormatBPS(v float64) string { return humanRate(v, "bps") }
