// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Seed 000's method, as code: one warm-up, then N runs of
// `iperf3 --bidi --parallel P --json`; each run gives one received rate per
// direction, and the result is the mean and the *sample* standard deviation
// over all of them (2N values). Seed 001 measures one direction with one
// flow for 60 s: --direction forward|reverse (N values) and --time. Latency: a flood ping as warm-up, then a
// second flood ping whose mean and *population* standard deviation (ping's
// own mdev) are reported.

// IperfRun is one iperf3 run: what each side received (0 for the
// direction a one-way run does not measure).
type IperfRun struct {
	ForwardBPS float64 `json:"forward_bps"` // client -> server, received by the server
	ReverseBPS float64 `json:"reverse_bps"` // server -> client, received by the client
}

// Directions of `bench iperf3 --direction`.
const (
	DirForward = "forward" // client -> server (iperf3's default)
	DirReverse = "reverse" // server -> client (iperf3 --reverse)
	DirBidi    = "bidi"    // both at once (iperf3 --bidi), the ConnectX-6 SR-IOV guide
)

// values are the rates a run measured in direction dir.
func (r IperfRun) values(dir string) []float64 {
	switch dir {
	case DirForward:
		return []float64{r.ForwardBPS}
	case DirReverse:
		return []float64{r.ReverseBPS}
	}
	return []float64{r.ForwardBPS, r.ReverseBPS}
}

// IperfResult is the statistics of N runs.
type IperfResult struct {
	Command   string     `json:"command"`
	Direction string     `json:"direction"`
	Warmup    *IperfRun  `json:"warmup,omitempty"`
	Runs      []IperfRun `json:"runs"`
	N         int        `json:"n"` // values: 2 per run with bidi, else 1
	MeanBPS   float64    `json:"mean_bps"`
	StdDevBPS float64    `json:"stddev_bps"` // sample standard deviation (n-1)
}

// ParseIperf3 reads one `iperf3 --bidi --json` output.
func ParseIperf3(b []byte) (IperfRun, error) { return ParseIperf3Dir(b, DirBidi) }

// ParseIperf3Dir reads one `iperf3 --json` output of a run in direction
// dir: end.sum_received is what the receiving side got (the server going
// forward, the client with --reverse).
func ParseIperf3Dir(b []byte, dir string) (IperfRun, error) {
	type sum struct {
		BitsPerSecond float64 `json:"bits_per_second"`
	}
	var doc struct {
		Error string `json:"error"`
		End   struct {
			Fwd *sum `json:"sum_received"`
			Rev *sum `json:"sum_received_bidir_reverse"`
		} `json:"end"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return IperfRun{}, fmt.Errorf("iperf3 JSON: %w", err)
	}
	if doc.Error != "" {
		return IperfRun{}, fmt.Errorf("iperf3: %s", doc.Error)
	}
	fwd, rev := doc.End.Fwd, doc.End.Rev
	switch dir {
	case DirForward, DirReverse:
		if fwd == nil {
			return IperfRun{}, errors.New("iperf3 JSON has no end.sum_received")
		}
		if dir == DirReverse {
			return IperfRun{ReverseBPS: fwd.BitsPerSecond}, nil
		}
		return IperfRun{ForwardBPS: fwd.BitsPerSecond}, nil
	}
	if fwd == nil || rev == nil {
		return IperfRun{}, errors.New("iperf3 JSON has no sum_received and sum_received_bidir_reverse: run iperf3 with --bidi (3.7 or later)")
	}
	if fwd.BitsPerSecond < 0 || rev.BitsPerSecond < 0 {
		return IperfRun{}, fmt.Errorf("iperf3 JSON: negative rates (%g and %g bits/s): not iperf3's output", fwd.BitsPerSecond, rev.BitsPerSecond)
	}
	return IperfRun{ForwardBPS: fwd.BitsPerSecond, ReverseBPS: rev.BitsPerSecond}, nil
}

// IperfStats computes the mean and sample standard deviation over both
// directions of every run.
func IperfStats(runs []IperfRun) IperfResult { return IperfStatsDir(runs, DirBidi) }

// IperfStatsDir computes them over the values direction dir measured.
func IperfStatsDir(runs []IperfRun, dir string) IperfResult {
	r := IperfResult{Runs: runs, Direction: dir}
	var v []float64
	for _, x := range runs {
		v = append(v, x.values(dir)...)
	}
	r.N = len(v)
	r.MeanBPS, r.StdDevBPS = meanStd(v, 1)
	return r
}

// meanStd returns the mean and the standard deviation with ddof degrees of
// freedom removed (1: sample, 0: population).
func meanStd(v []float64, ddof int) (float64, float64) {
	if len(v) == 0 {
		return 0, 0
	}
	var sum float64
	for _, x := range v {
		sum += x
	}
	mean := sum / float64(len(v))
	if len(v) <= ddof {
		return mean, 0
	}
	var ss float64
	for _, x := range v {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(v)-ddof))
}

// Where iperf3 and ping run: on this host towards Target, or in a lab's
// namespaces (client in the generator's, server in the sink's).
type Endpoints struct {
	Target   string
	ClientNS string
	ServerNS string
}

func (e Endpoints) cmd(ns string, name string, args ...string) *exec.Cmd {
	if ns == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// IperfOptions configure `bench iperf3`.
type IperfOptions struct {
	Endpoints
	Runs     int
	Parallel int
	Seconds  int
	// Direction is forward, reverse or bidi ("" is bidi).
	Direction string
	Progress  func(i int, r IperfRun) // i = 0 is the warm-up
}

// RunIperf3 runs the warm-up and the runs. With a ServerNS it starts and
// stops its own server there.
func RunIperf3(ctx context.Context, o IperfOptions) (*IperfResult, error) {
	if o.Runs < 2 {
		return nil, fmt.Errorf("--runs %d: at least 2 (a sample standard deviation needs them)", o.Runs)
	}
	if o.Parallel < 1 || o.Parallel > 128 {
		return nil, fmt.Errorf("--parallel %d: use 1 to 128", o.Parallel)
	}
	if o.Seconds < 1 {
		return nil, fmt.Errorf("--time %d: at least 1 second", o.Seconds)
	}
	dirFlag := map[string][]string{DirForward: nil, DirReverse: {"--reverse"}, DirBidi: {"--bidi"}, "": {"--bidi"}}
	extra, ok := dirFlag[o.Direction]
	if !ok {
		return nil, fmt.Errorf("--direction %q: use forward (client to server), reverse (server to client) or bidi (both at once)", o.Direction)
	}
	if o.Direction == "" {
		o.Direction = DirBidi
	}
	if _, err := exec.LookPath("iperf3"); err != nil {
		return nil, errors.New("iperf3 is not installed: run 'make setup' (or apt-get install iperf3)")
	}
	if o.ServerNS != "" {
		srv := o.cmd(o.ServerNS, "iperf3", "--server", "--bind", o.Target)
		if err := srv.Start(); err != nil {
			return nil, fmt.Errorf("starting the iperf3 server: %w", err)
		}
		defer func() { srv.Process.Kill(); srv.Wait() }()
	}
	args := append(append([]string{"--client", o.Target}, extra...), "--parallel", strconv.Itoa(o.Parallel), "--time", strconv.Itoa(o.Seconds), "--json")
	one := func() (IperfRun, error) {
		c := o.cmd(o.ClientNS, "iperf3", args...)
		out, err := c.Output()
		if r, perr := ParseIperf3Dir(out, o.Direction); perr == nil {
			return r, nil
		} else if err == nil {
			err = perr
		}
		return IperfRun{}, fmt.Errorf("iperf3 %s: %w", strings.Join(args, " "), err)
	}
	// The warm-up also waits for a server started here to listen: a fixed
	// pause was too short in the TCG test VM under load (connection refused).
	warm, err := one()
	for wait := time.Now().Add(15 * time.Second); o.ServerNS != "" && err != nil &&
		strings.Contains(err.Error(), "Connection refused") && time.Now().Before(wait); {
		time.Sleep(200 * time.Millisecond)
		warm, err = one()
	}
	if err != nil {
		return nil, err
	}
	if o.Progress != nil {
		o.Progress(0, warm)
	}
	var runs []IperfRun
	for i := 1; i <= o.Runs; i++ {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r, err := one()
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
		if o.Progress != nil {
			o.Progress(i, r)
		}
	}
	res := IperfStatsDir(runs, o.Direction)
	res.Warmup = &warm
	res.Command = "iperf3 " + strings.Join(args, " ")
	return &res, nil
}

// PingStats is one flood ping's summary. StdDevUs is ping's mdev: the
// population standard deviation of the round-trip times.
type PingStats struct {
	Sent     int     `json:"sent"`
	Received int     `json:"received"`
	MinUs    float64 `json:"min_us"`
	MeanUs   float64 `json:"mean_us"`
	MaxUs    float64 `json:"max_us"`
	StdDevUs float64 `json:"stddev_us"`
}

// PingResult is the warm-up and the measured run.
type PingResult struct {
	Command string    `json:"command"`
	Warmup  PingStats `json:"warmup"`
	Run     PingStats `json:"run"`
}

var (
	pingCounts = regexp.MustCompile(`(\d+) packets transmitted, (\d+) (?:packets )?received`)
	pingRTT    = regexp.MustCompile(`(?:rtt|round-trip) min/avg/max/(?:mdev|stddev) = ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms`)
)

// ParsePing reads the summary of iputils ping.
func ParsePing(out string) (PingStats, error) {
	var s PingStats
	m := pingCounts.FindStringSubmatch(out)
	if m == nil {
		return s, fmt.Errorf("no ping summary in: %q", lastLines(out, 3))
	}
	var errS, errR error
	s.Sent, errS = strconv.Atoi(m[1])
	s.Received, errR = strconv.Atoi(m[2])
	if errS != nil || errR != nil || s.Received > s.Sent {
		return s, fmt.Errorf("implausible ping summary %q", m[0])
	}
	r := pingRTT.FindStringSubmatch(out)
	if r == nil {
		if s.Received == 0 {
			return s, fmt.Errorf("ping: none of %d echo requests was answered", s.Sent)
		}
		return s, fmt.Errorf("no rtt line in: %q", lastLines(out, 3))
	}
	v := make([]float64, 4)
	for i := range v {
		var err error
		v[i], err = strconv.ParseFloat(r[i+1], 64)
		v[i] *= 1000 // ms -> µs
		if err != nil || math.IsInf(v[i], 0) {
			return s, fmt.Errorf("implausible ping rtt line %q", r[0])
		}
	}
	if v[0] > v[1] || v[1] > v[2] {
		return s, fmt.Errorf("implausible ping rtt line %q: min <= avg <= max does not hold", r[0])
	}
	s.MinUs, s.MeanUs, s.MaxUs, s.StdDevUs = v[0], v[1], v[2], v[3]
	return s, nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// PingOptions configure `bench ping`.
type PingOptions struct {
	Endpoints
	Count int
}

// RunPing runs a flood ping to warm up and a second one to measure.
func RunPing(ctx context.Context, o PingOptions) (*PingResult, error) {
	if o.Count < 2 {
		return nil, fmt.Errorf("--count %d: at least 2", o.Count)
	}
	args := []string{"-f", "-c", strconv.Itoa(o.Count), "-W", "1", o.Target}
	one := func() (PingStats, error) {
		out, _ := o.cmd(o.ClientNS, "ping", args...).CombinedOutput()
		return ParsePing(string(out))
	}
	res := &PingResult{Command: "ping " + strings.Join(args, " ")}
	var err error
	if res.Warmup, err = one(); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if res.Run, err = one(); err != nil {
		return nil, err
	}
	return res, nil
}
