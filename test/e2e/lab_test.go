// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"sluice/internal/testutil"
)

// labName is unique per test process and test, short enough for the
// lab's 12-character limit.
func labName(suffix string) string {
	return fmt.Sprintf("e%d%s", os.Getpid()%100000, suffix)
}

func labNeedsRoot(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t, "network namespaces and XDP")
}

// labUp brings a lab up and registers its removal.
func labUp(t *testing.T, bin, name string, args ...string) {
	t.Helper()
	t.Cleanup(func() { exec.Command(bin, "lab", "down", name).Run() })
	run(t, bin, append([]string{"lab", "up", "--name", name}, args...)...)
}

// benchReport runs a bench command with --out and reads its report.json.
type benchStep struct {
	Index           int                `json:"index"`
	TargetPPS       float64            `json:"target_pps"`
	TxPPS           float64            `json:"tx_pps"`
	RxPPS           float64            `json:"rx_pps"`
	TxPackets       uint64             `json:"tx_packets"`
	RxPackets       uint64             `json:"rx_packets"`
	Lost            uint64             `json:"lost_packets"`
	LossPct         float64            `json:"loss_pct"`
	Late            uint64             `json:"late_packets"`
	TsBackwards     uint64             `json:"ts_backwards"`
	Clean           bool               `json:"clean"`
	GenLimited      bool               `json:"generator_limited"`
	KernelForwarded uint64             `json:"kernel_forwarded"`
	LatencyRaw      map[string]float64 `json:"latency"`
	Streams         []struct {
		Size      int    `json:"size"`
		TxPackets uint64 `json:"tx_packets"`
		RxPackets uint64 `json:"rx_packets"`
		Lost      uint64 `json:"lost_packets"`
	} `json:"streams"`
}

type benchRun struct {
	Label     string      `json:"label"`
	Round     int         `json:"round"`
	Forwarder string      `json:"forwarder"`
	Steps     []benchStep `json:"steps"`
	MaxClean  int         `json:"max_clean_step"`
	TotalTx   uint64      `json:"total_tx_packets"`
	TotalRx   uint64      `json:"total_rx_packets"`
	TotalLost uint64      `json:"total_lost_packets"`
	Search    *struct {
		Kind    string  `json:"kind"`
		RatePPS float64 `json:"rate_pps"`
		Trials  int     `json:"trials"`
	} `json:"search"`
	Ceiling *struct {
		Limit string `json:"limit"`
		Step  int    `json:"step"`
		Text  string `json:"text"`
	} `json:"ceiling"`
}

type benchReport struct {
	Kind  string     `json:"kind"`
	Notes []string   `json:"notes"`
	Runs  []benchRun `json:"runs"`
}

func runBench(t *testing.T, bin string, args ...string) (*benchReport, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "report")
	out := run(t, bin, append(append([]string{"bench"}, args...), "--out", dir)...)
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatalf("no report.json: %v\n%s", err, out)
	}
	var r benchReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Runs) == 0 {
		t.Fatalf("report has no runs:\n%s", out)
	}
	return &r, dir
}

// xdpDrops sums rx_queue_*_xdp_drops of a veth (ethtool -S): what the
// sink's XDP program dropped, counted by the driver, not by sluice.
func xdpDrops(t *testing.T, ns, dev string) uint64 {
	t.Helper()
	var n uint64
	for _, line := range strings.Split(inNS(t, ns, "ethtool", "-S", dev), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && strings.HasPrefix(k, "rx_queue_") && strings.HasSuffix(k, "_xdp_drops") {
			x, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			n += x
		}
	}
	return n
}

func netnsList(t *testing.T) string {
	out, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	return string(out)
}

// TestLabUpDownLeavesNothing builds both topologies (gateway-pair with the
// sluice forwarder: two gateway daemons, pinned links), checks that up is
// idempotent and refuses a different shape under the same name, that TCP
// crosses both XDP forwarders (tcpAcrossXDP), and that down removes every
// namespace, daemon, pin, mount and state file.
func TestLabUpDownLeavesNothing(t *testing.T) {
	labNeedsRoot(t)
	bin := sluiceBin(t)
	fw, gp := labName("f"), labName("g")
	labUp(t, bin, fw, "forwarder", "--forwarder", "xdp-redirect")
	out := run(t, bin, "lab", "up", "--name", fw, "forwarder", "--forwarder", "xdp-redirect")
	if !strings.Contains(out, "already in place") {
		t.Errorf("second 'lab up' should find the lab whole:\n%s", out)
	}
	// Switching to the sluice forwarder runs its readiness check: the
	// gateway must forward the lab's traffic (it did not while the dut
	// had no route to the tunnels' peers: every SA's MTU was unknown).
	labUp(t, bin, fw, "forwarder", "--forwarder", "sluice")
	labUp(t, bin, fw, "forwarder", "--forwarder", "xdp-redirect")
	if out, err := exec.Command(bin, "lab", "up", "--name", fw, "forwarder", "--tunnels", "2").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "lab down") {
		t.Errorf("a different tunnel count under the same name must be refused with the fix; got %v:\n%s", err, out)
	}
	labUp(t, bin, gp, "gateway-pair", "--tunnels", "300", "--forwarder", "sluice")

	var st []struct {
		Name      string            `json:"name"`
		Topology  string            `json:"topology"`
		Tunnels   int               `json:"tunnels"`
		Forwarder string            `json:"forwarder"`
		NS        map[string]string `json:"namespaces"`
		Daemons   map[string]int    `json:"daemons"`
		Healthy   bool              `json:"healthy"`
	}
	if err := json.Unmarshal([]byte(run(t, bin, "lab", "status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	var daemons []int
	seen := 0
	for _, s := range st {
		switch s.Name {
		case fw:
			seen++
			if s.Topology != "forwarder" || s.Forwarder != "xdp-redirect" || !s.Healthy || len(s.NS) != 3 {
				t.Errorf("status of %s: %+v", fw, s)
			}
		case gp:
			seen++
			if s.Topology != "gateway-pair" || s.Tunnels != 300 || s.Forwarder != "sluice" || !s.Healthy || len(s.Daemons) != 2 {
				t.Errorf("status of %s: %+v", gp, s)
			}
			for _, p := range s.Daemons {
				daemons = append(daemons, p)
			}
		}
	}
	if seen != 2 {
		t.Fatalf("status lists %d of the 2 labs:\n%s", seen, run(t, bin, "lab", "status"))
	}
	// The seeds' plan: gw1 holds every tunnel's endpoint, gw0 a route per tunnel.
	if n := strings.Count(inNS(t, "sl-"+gp+"-gw1", "ip", "-4", "addr", "show", "dev", "p0"), "inet 123.0."); n != 300 {
		t.Errorf("gw1 p0 has %d tunnel endpoints, want 300", n)
	}
	if !strings.Contains(inNS(t, "sl-"+gp+"-gw0", "ip", "route", "get", "48.1.44.9"), "via 123.0.1.46") {
		t.Errorf("gw0 does not route tunnel 300's subnet 48.1.44.0/24 to its endpoint 123.0.1.46 (seed: 123.0.(i/255).(i%%255+1))")
	}
	for _, ns := range []string{"sl-" + fw + "-dut", "sl-" + gp + "-gw0", "sl-" + gp + "-gw1"} {
		if !strings.Contains(inNS(t, ns, "ip", "link"), "prog/xdp") {
			t.Errorf("%s has no XDP forwarder attached", ns)
		}
	}
	tcpAcrossXDP(t, bin, fw, gp)

	for _, name := range []string{fw, gp} {
		out := run(t, bin, "lab", "down", name, "--json")
		if !strings.Contains(out, "namespaces_removed") {
			t.Errorf("lab down %s said:\n%s", name, out)
		}
	}
	list := netnsList(t)
	for _, name := range []string{fw, gp} {
		if strings.Contains(list, "sl-"+name+"-") {
			t.Errorf("namespaces of %s left behind:\n%s", name, list)
		}
		if _, err := os.Stat("/run/sluice/lab/" + name); !os.IsNotExist(err) {
			t.Errorf("state of %s left behind: %v", name, err)
		}
		mounts, _ := os.ReadFile("/proc/self/mounts")
		if bytes.Contains(mounts, []byte("/run/sluice/lab/"+name+"/")) {
			t.Errorf("bpffs of %s still mounted", name)
		}
	}
	for _, pid := range daemons {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); bytes.Contains(b, []byte("gateway")) {
				t.Errorf("gateway daemon %d still running", pid)
			}
		}
	}
	if out := run(t, bin, "lab", "down", fw); !strings.Contains(out, "nothing to remove") {
		t.Errorf("a second down should have nothing to do:\n%s", out)
	}
}

// TestBenchCountsExactly sends two profiles through the bare XDP redirect
// forwarder at rates it carries and checks the accounting: sent =
// received + lost per step and stream, no loss, no reordering, monotonic
// stamps, ordered latency percentiles, and the sink's count equal to what
// the veth driver says the sink's XDP program dropped.
func TestBenchCountsExactly(t *testing.T) {
	labNeedsRoot(t)
	bin := sluiceBin(t)
	name := labName("x")
	labUp(t, bin, name, "forwarder", "--forwarder", "xdp-redirect")
	sinkNS := "sl-" + name + "-sink"
	for _, prof := range []string{"fixed-64", "imix-mno-2"} {
		t.Run(prof, func(t *testing.T) {
			before := xdpDrops(t, sinkNS, "s0")
			// 100 kpps: each BPF_PROG_RUN call carries at most 2 ms of
			// traffic, 200 frames, less than a veth ring (256), so even when
			// other work defers the receiving NAPI to ksoftirqd, no ring
			// overflows: this test can only lose frames to a counting bug.
			r, _ := runBench(t, bin, "run", "--lab", name, "--profile", prof, "--rate-max", "100kpps", "--steps", "2", "--step-seconds", "0.5")
			drops := xdpDrops(t, sinkNS, "s0") - before
			run := r.Runs[0]
			if run.TotalRx != drops {
				t.Errorf("sink counted %d frames, the driver saw %d XDP drops at the sink", run.TotalRx, drops)
			}
			if run.TotalTx != run.TotalRx+run.TotalLost {
				t.Errorf("sent %d != received %d + lost %d", run.TotalTx, run.TotalRx, run.TotalLost)
			}
			for _, s := range run.Steps {
				if s.TxPackets == 0 || s.TxPackets != s.RxPackets+s.Lost || s.Lost != 0 {
					t.Errorf("step %d: sent %d, received %d, lost %d: want lossless and exact", s.Index, s.TxPackets, s.RxPackets, s.Lost)
				}
				// Paced to the target: never more than 10% over it in a 0.5 s
				// step. Under it only when the generator could not keep up
				// (a loaded machine), and then the report must say so.
				if got := float64(s.TxPackets) / 0.5; got > 1.1*s.TargetPPS || (got < 0.9*s.TargetPPS && !s.GenLimited) {
					t.Errorf("step %d: sent %.0f pps for a target of %.0f (generator limited: %v)", s.Index, got, s.TargetPPS, s.GenLimited)
				}
				if s.Late != 0 || s.TsBackwards != 0 {
					t.Errorf("step %d: %d late, %d stamps went back in time", s.Index, s.Late, s.TsBackwards)
				}
				l := s.LatencyRaw
				if !(l["min_us"] > 0 && l["min_us"] <= l["p50_us"] && l["p50_us"] <= l["p99_us"] && l["p99_us"] <= l["p999_us"] && l["p999_us"] <= l["max_us"]) {
					t.Errorf("step %d: latency not ordered: %v", s.Index, l)
				}
				if s.KernelForwarded > 10 {
					t.Errorf("step %d: the dut's kernel forwarded %d datagrams: XDP should carry them", s.Index, s.KernelForwarded)
				}
				var tx, rx uint64
				for _, st := range s.Streams {
					tx += st.TxPackets
					rx += st.RxPackets
				}
				if tx != s.TxPackets || rx != s.RxPackets {
					t.Errorf("step %d: streams sum to %d/%d, step says %d/%d", s.Index, tx, rx, s.TxPackets, s.RxPackets)
				}
			}
			if run.MaxClean != 2 {
				t.Errorf("max clean step %d, want 2 (both steps clean, the second faster)", run.MaxClean)
			}
		})
	}
}

// TestBenchMeasuresInducedLoss drops every 10th frame in the forwarder and
// expects 10% loss, exactly accounted.
func TestBenchMeasuresInducedLoss(t *testing.T) {
	labNeedsRoot(t)
	bin := sluiceBin(t)
	name := labName("l")
	labUp(t, bin, name, "forwarder", "--forwarder", "xdp-redirect", "--drop-every", "10")
	r, _ := runBench(t, bin, "run", "--lab", name, "--profile", "imix-simple", "--rate-max", "100kpps", "--steps", "2", "--step-seconds", "0.5")
	for _, s := range r.Runs[0].Steps {
		if s.TxPackets != s.RxPackets+s.Lost {
			t.Errorf("step %d: sent %d != received %d + lost %d", s.Index, s.TxPackets, s.RxPackets, s.Lost)
		}
		if s.LossPct < 9.5 || s.LossPct > 10.5 {
			t.Errorf("step %d: loss %.3f%%, want 10%% ± 0.5", s.Index, s.LossPct)
		}
		if s.Clean {
			t.Errorf("step %d with %.1f%% loss is marked clean", s.Index, s.LossPct)
		}
	}
	if r.Runs[0].MaxClean != 0 {
		t.Errorf("max clean step %d, want none", r.Runs[0].MaxClean)
	}
}

// TestNDRSearchFindsTheBottleneck limits the forwarder to 100 kpps with a
// token bucket; the no-drop-rate search must land just below it.
func TestNDRSearchFindsTheBottleneck(t *testing.T) {
	labNeedsRoot(t)
	bin := sluiceBin(t)
	name := labName("n")
	labUp(t, bin, name, "forwarder", "--forwarder", "xdp-redirect", "--rate-limit", "100kpps")
	r, _ := runBench(t, bin, "run", "--lab", name, "--profile", "fixed-64", "--search", "ndr",
		"--rate-max", "400kpps", "--steps", "8", "--step-seconds", "0.4")
	s := r.Runs[0].Search
	if r.Kind != "ndr" || s == nil {
		t.Fatalf("report kind %q, search %+v", r.Kind, s)
	}
	// Judged by what the report says of each trial, not by the machine's
	// speed: on a loaded host the generator falls short of its target, the
	// report flags the trial as generator limited and the search counts it
	// as failed (it cannot show the path carries the rate), so the NDR may
	// end below the limit, but only for that reason.
	var trials []string
	genLimited := 0
	for _, st := range r.Runs[0].Steps {
		trials = append(trials, fmt.Sprintf("%.0f pps: sent %.0f pps, received %.0f pps, lost %d of %d, generator limited %v", st.TargetPPS, st.TxPPS, st.RxPPS, st.Lost, st.TxPackets, st.GenLimited))
		if st.GenLimited {
			genLimited++
		}
	}
	report := strings.Join(trials, "\n")
	if s.RatePPS > 1.02*100e3 {
		t.Errorf("NDR %.0f pps, above the 100 kpps limit; trials:\n%s", s.RatePPS, report)
	}
	if s.RatePPS < 0.85*100e3 && genLimited == 0 {
		t.Errorf("NDR %.0f pps, want within [85k, 102k] below the 100 kpps limit (no trial was generator limited); trials:\n%s", s.RatePPS, report)
	}
	for _, st := range r.Runs[0].Steps {
		// Whatever the generator managed, the limiter passes no more than
		// its rate (its burst is 500 packets, 1.25 kpps over a 0.4 s trial).
		if st.RxPPS > 1.05*100e3 {
			t.Errorf("trial at %.0f pps: b received %.0f pps, above the 100 kpps limit; trials:\n%s", st.TargetPPS, st.RxPPS, report)
		}
		// Above the limit (by what was sent, not asked for) the limiter drops.
		if st.TxPPS > 1.05*100e3 && st.Lost == 0 {
			t.Errorf("trial at %.0f pps sent %.0f pps, above the limit, and lost nothing; trials:\n%s", st.TargetPPS, st.TxPPS, report)
		}
		// Well below it nothing is lost, unless the generator was short.
		if st.TargetPPS < 0.85*100e3 && st.Lost > 0 && !st.GenLimited {
			t.Errorf("trial at %.0f pps, below the limit, lost %d; trials:\n%s", st.TargetPPS, st.Lost, report)
		}
	}
	if genLimited > 0 {
		t.Logf("%d trials generator limited (a loaded machine); NDR %.0f pps; trials:\n%s", genLimited, s.RatePPS, report)
	}
}

// TestReportValidatesAndRendersInChromium compares two forwarders, checks
// report.json against its JSON Schema, and renders report.html in headless
// chromium: every run and every chart must be in the rendered page.
func TestReportValidatesAndRendersInChromium(t *testing.T) {
	labNeedsRoot(t)
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: run 'make setup' (scripts/setup.sh installs it)")
	}
	bin := sluiceBin(t)
	r, dir := runBench(t, bin, "compare", "--topology", "forwarder", "--forwarders", "kernel,xdp-redirect",
		"--profile", "imix-mno-1", "--rate-max", "300kpps", "--steps", "2", "--step-seconds", "0.3")
	if len(r.Runs) != 2 || r.Runs[0].Label != "kernel" || r.Runs[1].Label != "xdp-redirect" {
		t.Fatalf("runs: %+v", r.Runs)
	}
	if len(r.Notes) == 0 || !strings.Contains(r.Notes[0], "nothing encrypts") {
		t.Errorf("the report must say that nothing encrypts on veth: %q", r.Notes)
	}
	// report.json against the schema
	sch := validateReport(t, dir)
	// and the schema is not a rubber stamp
	var broken map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, "report.json"))
	json.Unmarshal(b, &broken)
	broken["runs"].([]any)[0].(map[string]any)["steps"].([]any)[0].(map[string]any)["loss_pct"] = -1
	if err := sch.Validate(broken); err == nil {
		t.Error("a report with a negative loss validates")
	}

	for _, fn := range []string{"steps.csv", "summary.png", "summary.svg", "throughput.png", "throughput.svg", "latency.png", "latency.svg", "loss.png", "loss.svg"} {
		if st, err := os.Stat(filepath.Join(dir, fn)); err != nil || st.Size() < 100 {
			t.Errorf("%s missing or empty: %v", fn, err)
		}
	}
	csvLines := strings.Split(strings.TrimSpace(string(mustRead(t, filepath.Join(dir, "steps.csv")))), "\n")
	if len(csvLines) != 1+4 {
		t.Errorf("steps.csv has %d lines, want a header and 4 steps", len(csvLines))
	}

	// headless chromium: the DOM after rendering, and a screenshot
	profile := t.TempDir()
	html := "file://" + filepath.Join(dir, "report.html")
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--no-first-run", "--user-data-dir=" + profile}
	dom, err := exec.Command(chromium, append(args, "--dump-dom", html)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	for _, id := range []string{`id="summary"`, `id="run-1"`, `id="run-2"`, `id="chart-throughput"`, `id="chart-latency"`, `id="chart-loss"`} {
		if !bytes.Contains(dom, []byte(id)) {
			t.Errorf("rendered page lacks %s", id)
		}
	}
	if n := bytes.Count(dom, []byte("<svg")); n != 3 {
		t.Errorf("rendered page has %d SVG charts, want 3 (each chart once)", n)
	}
	for _, label := range []string{">kernel<", ">xdp-redirect<", "nothing encrypts"} {
		if !bytes.Contains(dom, []byte(label)) {
			t.Errorf("rendered page lacks %q", label)
		}
	}
	shot := filepath.Join(t.TempDir(), "shot.png")
	if out, err := exec.Command(chromium, append(args, "--screenshot="+shot, "--window-size=1200,3000", html)...).CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	if st, err := os.Stat(shot); err != nil || st.Size() < 20000 {
		t.Errorf("screenshot missing or blank (%v)", err)
	}
}

// validateReport checks dir/report.json against the report's JSON Schema
// and returns the compiled schema.
func validateReport(t *testing.T, dir string) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	schemaFile, err := filepath.Abs("../../internal/bench/report.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(schemaFile)
	if err != nil {
		t.Fatalf("compiling the schema: %v", err)
	}
	f, err := os.Open(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Errorf("report.json does not validate: %v", err)
	}
	return sch
}

// TestCompareRounds: --rounds repeats the comparison, every other round
// reversed, labels each run with its round and summarises medians.
func TestCompareRounds(t *testing.T) {
	labNeedsRoot(t)
	bin := sluiceBin(t)
	dir := filepath.Join(t.TempDir(), "report")
	out := run(t, bin, "bench", "compare", "--topology", "forwarder", "--forwarders", "kernel,xdp-redirect", "--rounds", "2",
		"--profile", "fixed-64", "--rate-max", "100kpps", "--steps", "1", "--step-seconds", "0.3", "--out", dir)
	var r benchReport
	if err := json.Unmarshal(mustRead(t, filepath.Join(dir, "report.json")), &r); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, run := range r.Runs {
		got = append(got, fmt.Sprintf("%s/%s/%d", run.Label, run.Forwarder, run.Round))
	}
	want := "kernel #1/kernel/1 xdp-redirect #1/xdp-redirect/1 xdp-redirect #2/xdp-redirect/2 kernel #2/kernel/2"
	if strings.Join(got, " ") != want {
		t.Errorf("runs %v, want %s", got, want)
	}
	validateReport(t, dir)
	if !strings.Contains(out, "medians of 2 rounds") || strings.Count(out, "\n  xdp-redirect ") != 1 {
		t.Errorf("the summary should have one line per forwarder and say it gives medians of 2 rounds:\n%s", out)
	}
}

// TestCompareRampSaysWhatSetTheNumber: with --rate-max auto the load rises
// by --rate-factor until a step loses more than the threshold (then
// --refine trials bisect) or the generator falls short of its target and
// stops gaining, twice in a row; every run
// says what set its number, consistently with its steps, in report.json
// and in the summary. Which limit a run meets depends on the machine, so
// the test checks the rules, not the numbers.
func TestCompareRampSaysWhatSetTheNumber(t *testing.T) {
	labNeedsRoot(t)
	bin := sluiceBin(t)
	dir := filepath.Join(t.TempDir(), "report")
	out := run(t, bin, "bench", "compare", "--topology", "forwarder", "--forwarders", "kernel,xdp-redirect",
		"--profile", "fixed-64", "--rate-max", "auto", "--rate-start", "200kpps", "--rate-factor", "10", "--steps", "3",
		"--refine", "1", "--step-seconds", "0.3", "--out", dir)
	var r benchReport
	if err := json.Unmarshal(mustRead(t, filepath.Join(dir, "report.json")), &r); err != nil {
		t.Fatal(err)
	}
	validateReport(t, dir)
	if len(r.Runs) != 2 {
		t.Fatalf("%d runs, want kernel and xdp-redirect:\n%s", len(r.Runs), out)
	}
	if !strings.Contains(out, "what set each run's max-clean rate:") {
		t.Errorf("the summary does not say what set each number:\n%s", out)
	}
	for _, run := range r.Runs {
		c := run.Ceiling
		if c == nil || c.Text == "" {
			t.Fatalf("%s: no ceiling in report.json", run.Label)
		}
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(run.Label) + `: +` + regexp.QuoteMeta(c.Text) + `$`).MatchString(out) {
			t.Errorf("%s: the summary lacks %q:\n%s", run.Label, c.Text, out)
		}
		// The climb ends at a step that lost, or at the second step in a
		// row where the generator fell short and sent at most 5% more
		// than ever before.
		end, short, best, stalled := -1, false, 0.0, 0
		for i, s := range run.Steps {
			short = short || s.GenLimited
			if want := 200e3 * math.Pow(10, float64(i)); math.Abs(s.TargetPPS-want) > 1 {
				t.Errorf("%s step %d: target %.0f, want %.0f (times 10 per step)", run.Label, s.Index, s.TargetPPS, want)
			}
			if s.TxPackets == 0 || s.LossPct > 0 {
				end = i
				break
			}
			if s.GenLimited && i > 0 && s.TxPPS <= 1.05*best {
				if stalled++; stalled == 2 {
					end = i
					break
				}
			} else {
				stalled = 0
			}
			best = max(best, s.TxPPS)
		}
		switch {
		case end < 0 && len(run.Steps) != 3:
			t.Errorf("%s: the climb did not end, yet %d steps: want the 3 rising steps", run.Label, len(run.Steps))
		case end < 0 && !short && c.Limit != "none":
			t.Errorf("%s: every step passed, yet limit %q: want none", run.Label, c.Limit)
		case end >= 0 && run.Steps[end].LossPct > 0 && len(run.Steps) != end+2:
			t.Errorf("%s: %d steps after the loss at step %d, want the one refining trial", run.Label, len(run.Steps)-end-1, end+1)
		case end >= 0 && run.Steps[end].LossPct == 0 && len(run.Steps) != end+1:
			t.Errorf("%s: %d steps after the generator stopped gaining at step %d, want none", run.Label, len(run.Steps)-end-1, end+1)
		}
		if c.Step > 0 {
			s := run.Steps[c.Step-1]
			switch c.Limit {
			case "forwarder":
				if s.LossPct == 0 {
					t.Errorf("%s: forwarder limit at step %d, which lost nothing: %+v", run.Label, c.Step, s)
				}
			case "generator":
				if !s.GenLimited || s.LossPct > 0 {
					t.Errorf("%s: generator limit at step %d, which is not a clean step short of its target: %+v", run.Label, c.Step, s)
				}
			}
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLabOverlayPairNeedsVM: on this host (no ESP) overlay-pair says what
// the kernel lacks and how to run it, and --vm runs the same lab in the
// test VM, with a command that measures across it, and brings the
// command's output and exit code back. The overlay itself is tested in
// the VM suite (test/vm/lab_test.go).
func TestLabOverlayPairNeedsVM(t *testing.T) {
	labNeedsRoot(t)
	bin := sluiceBin(t)
	features := run(t, bin, "version", "--json")
	if strings.Contains(features, `"esp": true`) {
		t.Skip("this kernel has ESP: overlay-pair builds here, nothing to refuse")
	}
	name := labName("o")
	cmd := exec.Command(bin, "lab", "up", "overlay-pair", "--name", name)
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != 4 ||
		!strings.Contains(string(out), "esp (") || !strings.Contains(string(out), "--vm") {
		t.Errorf("lab up overlay-pair on a kernel without ESP: exit %d, want 4 naming esp and --vm:\n%s", code, out)
	}
	if strings.Contains(netnsList(t), "sl-"+name+"-") {
		t.Errorf("a refused lab left namespaces behind")
	}

	// One boot: the command measures, lists the lab, and exits 7, which
	// must come back as sluice's own exit code.
	cmd = exec.Command(bin, "lab", "up", "overlay-pair", "--name", name, "--tunnels", "2", "--vm", "--",
		"sluice", "bench", "ping", "--lab", name, "--count", "100", "--json", "&&", "sluice", "lab", "status", name, "--json", "&&", "exit", "7")
	out, _ = cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 7 {
		t.Errorf("--vm must pass the command's exit code back: got %d, want 7:\n%s", code, out)
	}
	text := string(out)
	for _, want := range []string{"applied and verified", `"received": 100`, `"topology": "overlay-pair"`, `"healthy": true`} {
		if !strings.Contains(text, want) {
			t.Errorf("--vm output lacks %q:\n%s", want, text)
		}
	}
}

// tcpAcrossXDP: the hosts' own TCP crosses the XDP forwarders. A frame
// XDP redirects loses a checksum left to the NIC (CHECKSUM_PARTIAL), and
// the receiver dropped every segment, so the lab's ports have checksum
// offload off (issue 22's note; internal/lab build). fw runs xdp-redirect:
// `bench iperf3`'s 10.0.0.1 -> 11.0.0.1 is redirected in the dut. gp runs
// sluice: TCP between 16.0.0.1 and 48.0.0.1 rides tunnel 1, small
// segments in both daemons' XDP, full ones past the SA's MTU forwarded by
// gw0's kernel (GRO, then segmented again) into gw1's XDP.
func tcpAcrossXDP(t *testing.T, bin, fw, gp string) {
	t.Helper()
	if out, err := tcpThrough(t, "sl-"+fw+"-gen", "sl-"+fw+"-sink", "10.0.0.1", "11.0.0.1"); err != nil {
		t.Errorf("TCP through xdp-redirect: %v\n%s", err, out)
	}
	gen, gw0, sink := "sl-"+gp+"-gen", "sl-"+gp+"-gw0", "sl-"+gp+"-sink"
	run(t, "ip", "-n", gen, "addr", "add", "16.0.0.1/32", "dev", "lo")
	run(t, "ip", "-n", sink, "addr", "add", "48.0.0.1/32", "dev", "lo")
	explain := run(t, "ip", "netns", "exec", gw0, bin, "gateway", "explain", "--pin-dir", "/run/sluice/lab/"+gp+"/bpf/gw-gw0",
		"--iface", "p1", "src", "16.0.0.1", "dst", "48.0.0.1", "proto", "tcp", "sport", "40000", "dport", "5301")
	if !strings.Contains(explain, "XDP_REDIRECT (forward-out)") {
		t.Fatalf("gw0 would not forward the test's TCP in XDP:\n%s", explain)
	}
	if out, err := tcpThrough(t, gen, sink, "16.0.0.1", "48.0.0.1"); err != nil {
		t.Errorf("TCP through the sluice gateways: %v\n%s", err, out)
	}
}

// tcpThrough moves 2 MB over one TCP connection (iperf3) from src in
// genNS to dst in sinkNS.
func tcpThrough(t *testing.T, genNS, sinkNS, src, dst string) (string, error) {
	t.Helper()
	srv := exec.Command("ip", "netns", "exec", sinkNS, "iperf3", "-s", "-1", "-B", dst, "-p", "5301")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }() // 'ip netns exec' execs iperf3: same pid
	for i := 0; ; i++ {
		if out, _ := exec.Command("ip", "netns", "exec", sinkNS, "ss", "-Hltn", "sport", "= :5301").Output(); len(bytes.TrimSpace(out)) > 0 {
			break
		}
		if i == 100 {
			t.Fatal("iperf3 -s did not listen within 5s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, err := exec.Command("timeout", "15", "ip", "netns", "exec", genNS, "iperf3", "-c", dst, "-B", src, "-p", "5301",
		"-n", "2M", "--connect-timeout", "3000").CombinedOutput()
	return string(out), err
}
