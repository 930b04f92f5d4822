// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"sluice/internal/lab"
)

// Rate is a load: packets or bits (L2 with FCS) per second.
type Rate struct {
	Value float64 `json:"value"`
	Unit  string  `json:"unit"` // "pps" or "bps"
}

func (r Rate) String() string {
	if r.Value == 0 {
		return "max"
	}
	return humanRate(r.Value, r.Unit)
}

// PPS converts the rate to packets per second for a profile.
func (r Rate) PPS(p *Profile) float64 {
	if r.Unit == "bps" {
		return r.Value / (8 * p.MeanFrame())
	}
	return r.Value
}

// ParseRate reads "2Mpps", "500kpps", "1.5M" (pps), "10Gbps", "800Mbps".
// flag names the flag in errors.
// maxRate bounds a rate by unit: 10 Tbit/s, and the packets per second of
// 64-byte frames at that speed (about 15 Gpps).
var maxRate = map[string]float64{"bps": 10e12, "pps": 15e9}

func ParseRate(flag, s string) (Rate, error) {
	t := strings.TrimSpace(s)
	unit := "pps"
	lower := strings.ToLower(t)
	switch {
	case strings.HasSuffix(lower, "pps"):
		t = t[:len(t)-3]
	case strings.HasSuffix(lower, "bps"):
		t, unit = t[:len(t)-3], "bps"
	case strings.HasSuffix(lower, "bit/s"):
		t, unit = t[:len(t)-5], "bps"
	}
	mult := 1.0
	if t != "" {
		switch t[len(t)-1] {
		case 'k', 'K':
			mult, t = 1e3, t[:len(t)-1]
		case 'm', 'M':
			mult, t = 1e6, t[:len(t)-1]
		case 'g', 'G':
			mult, t = 1e9, t[:len(t)-1]
		}
	}
	t = strings.TrimSpace(t) // Rate.String prints "2.000 Mpps"; reports are where rates are copied from
	v, err := strconv.ParseFloat(t, 64)
	// !(v > 0) also refuses NaN, which every comparison lets through.
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return Rate{}, fmt.Errorf("%s %q: write a positive rate such as 2Mpps, 500kpps or 10Gbps", flag, s)
	}
	if limit := maxRate[unit]; v*mult > limit {
		return Rate{}, fmt.Errorf("%s %q: more than %g %s, which no link carries; write a rate such as 2Mpps or 10Gbps", flag, s, limit, unit)
	}
	return Rate{Value: v * mult, Unit: unit}, nil
}

// RunOptions configure one stepped run.
type RunOptions struct {
	Profile *Profile
	// Steps of linear amplification: step i (1-based) offers i/Steps of
	// RateMax, held for StepDuration.
	Steps        int
	StepDuration time.Duration
	RateMax      Rate
	// Ramp, when set, replaces the linear steps (--rate-max auto): Steps
	// then bounds the rising steps, and RateMax is unused.
	Ramp *Ramp
	// Rates, when set, replaces the linear steps (used by the searches).
	Rates []float64
	// LossThreshold in percent: a step at or below it is clean.
	LossThreshold float64
	// GenCPUs are the generator's CPUs.
	GenCPUs []int
	// Label names the run in reports (default: the forwarder).
	Label string
	// Progress gets every step as it ends (may be nil).
	Progress func(Step)
	// Tick is called about 4 times a second while a step runs (may be
	// nil): step index (1-based), time into the step, the step's length.
	Tick func(step int, elapsed, total time.Duration)
}

// Validate checks the options and names the flag to fix.
func (o *RunOptions) Validate() error {
	if o.Profile == nil {
		return errors.New("--profile: required")
	}
	if len(o.Rates) == 0 {
		if o.Steps < 1 || o.Steps > 1000 {
			return fmt.Errorf("--steps %d: use 1 to 1000", o.Steps)
		}
		if o.Ramp != nil {
			if err := o.Ramp.Validate(); err != nil {
				return err
			}
		} else if o.RateMax.Value <= 0 {
			return errors.New("--rate-max: required, e.g. 2Mpps or 10Gbps")
		}
	}
	if o.StepDuration < 100*time.Millisecond || o.StepDuration > time.Hour {
		return fmt.Errorf("--step-seconds %g: use 0.1 to 3600", o.StepDuration.Seconds())
	}
	if !(o.LossThreshold >= 0 && o.LossThreshold < 100) { // NaN fails both
		return fmt.Errorf("--loss-threshold %g: a percentage from 0 to below 100", o.LossThreshold)
	}
	return checkGenCPUs(o.GenCPUs)
}

// Run sends the stepped load through a lab that is up, with its current
// forwarder, and measures every step.
func Run(ctx context.Context, l *lab.Lab, o RunOptions) (*RunResult, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Ramp != nil && len(o.Rates) == 0 {
		return runAdaptive(ctx, l, o, func(done []Step) (float64, bool) {
			return o.Ramp.next(done, o.LossThreshold, o.Steps)
		})
	}
	rates := o.Rates
	if len(rates) == 0 {
		pmax := o.RateMax.PPS(o.Profile)
		for i := 1; i <= o.Steps; i++ {
			rates = append(rates, pmax*float64(i)/float64(o.Steps))
		}
	}
	return runAdaptive(ctx, l, o, func(done []Step) (float64, bool) {
		if len(done) < len(rates) {
			return rates[len(done)], true
		}
		return 0, false
	})
}

// runAdaptive runs steps at the rates next returns, given the steps so far,
// until it says stop.
func runAdaptive(ctx context.Context, l *lab.Lab, o RunOptions, next func(done []Step) (float64, bool)) (*RunResult, error) {
	if err := l.CheckForwarder(); err != nil {
		return nil, err
	}
	ends := l.Ends()
	sink, err := NewSink(ends)
	if err != nil {
		return nil, err
	}
	defer sink.Close()
	gen, err := NewGenerator(ends, o.Profile, o.GenCPUs)
	if err != nil {
		return nil, err
	}
	defer gen.Close()

	res := &RunResult{
		Label: o.Label, Forwarder: l.Forwarder, Topology: l.Topology, Tunnels: l.Tunnels,
		Profile: o.Profile.Name, LossThreshold: o.LossThreshold, RateMax: o.RateMax, GenCPUs: o.GenCPUs, Ramp: o.Ramp,
	}
	if o.Ramp != nil {
		res.RateMax = Rate{Unit: "pps"} // no top: the ramp's steps say where it went
	}
	if res.Label == "" {
		res.Label = l.Forwarder
		if l.Topology == lab.Direct {
			res.Label = "direct"
		}
	}
	res.kernelFwdBase = kernelForwarded(ends.Forwarding)
	m := newMeter(gen, sink, o.Profile, ends.Forwarding)
	if err := m.begin(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	for {
		rate, ok := next(res.Steps)
		if !ok {
			break
		}
		var stopTick func()
		if o.Tick != nil {
			stopTick = ticker(len(res.Steps)+1, o.StepDuration, o.Tick)
		}
		st, err := m.step(ctx, rate, o.StepDuration)
		if stopTick != nil {
			stopTick()
		}
		if err != nil {
			return nil, err
		}
		st.Index = len(res.Steps) + 1
		st.StartS = m.stepStart.Sub(t0).Seconds()
		st.Clean = st.TxPackets > 0 && st.LossPct <= o.LossThreshold
		res.Steps = append(res.Steps, *st)
		if o.Progress != nil {
			o.Progress(*st)
		}
		if ctx.Err() != nil {
			res.finish()
			return res, ctx.Err()
		}
	}
	res.finish()
	if n := gen.Errors(); n > 0 {
		return res, fmt.Errorf("the generator failed to build %d frames (bpf/gen.c gen_errors): the counts are not exact", n)
	}
	return res, nil
}

// ticker calls tick every 250 ms until the returned stop is called.
func ticker(step int, total time.Duration, tick func(int, time.Duration, time.Duration)) func() {
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				tick(step, min(time.Since(start), total), total)
			}
		}
	}()
	return func() { close(done); <-finished }
}

// meter takes the counter snapshots around each step.
type meter struct {
	gen        *Generator
	sink       *Sink
	prof       *Profile
	forwarding []string
	streams    []uint16
	sent       map[uint16]uint64
	recv       *SinkSnapshot
	stepStart  time.Time
}

func newMeter(g *Generator, s *Sink, p *Profile, fwd []string) *meter {
	m := &meter{gen: g, sink: s, prof: p, forwarding: fwd}
	for _, cpu := range g.cpus {
		for e := range p.Streams {
			m.streams = append(m.streams, uint16(cpu*maxEntries+e))
		}
	}
	return m
}

func (m *meter) begin() error {
	var err error
	if m.sent, err = m.gen.Sent(); err != nil {
		return err
	}
	m.recv, err = m.sink.Snapshot(m.streams, true)
	return err
}

// drain waits until the sink has stopped receiving: every frame sent in a
// step is either received or lost when the step is counted.
func (m *meter) drain() (*SinkSnapshot, error) {
	var last uint64 = math.MaxUint64
	deadline := time.Now().Add(2 * time.Second)
	for {
		time.Sleep(20 * time.Millisecond)
		snap, err := m.sink.Snapshot(m.streams, false)
		if err != nil {
			return nil, err
		}
		n := snap.Received()
		if n == last || time.Now().After(deadline) {
			return m.sink.Snapshot(m.streams, true)
		}
		last = n
	}
}

func (m *meter) step(ctx context.Context, rate float64, d time.Duration) (*Step, error) {
	m.stepStart = time.Now()
	if err := m.gen.Send(ctx, rate, d); err != nil {
		return nil, err
	}
	dur := time.Since(m.stepStart).Seconds()
	sent, err := m.gen.Sent()
	if err != nil {
		return nil, err
	}
	recv, err := m.drain()
	if err != nil {
		return nil, err
	}
	st := &Step{TargetPPS: rate, DurationS: dur}
	shares := m.prof.Shares()
	perEntry := make([]StreamStep, len(m.prof.Streams))
	for e, s := range m.prof.Streams {
		perEntry[e] = StreamStep{Entry: e, Size: s.Size, FrameLen: m.prof.FrameLen(s)}
	}
	var hist [histBuckets]uint64
	var latSum uint64
	for _, id := range m.streams {
		e := int(id) % maxEntries
		tx := sent[id] - m.sent[id]
		c, p := recv.Streams[id], m.recv.Streams[id]
		rx := c.Packets - p.Packets
		fl := uint64(m.prof.FrameLen(m.prof.Streams[e]))
		st.TxPackets += tx
		st.RxPackets += rx
		st.TxBytes += tx * (fl + fcsLen)
		st.RxBytes += (c.Bytes - p.Bytes) + rx*fcsLen
		st.Late += c.Late - p.Late
		st.TsBackwards += c.TsBackwards - p.TsBackwards
		latSum += c.LatSumNs - p.LatSumNs
		if rx > 0 {
			st.Latency.MaxUs = max(st.Latency.MaxUs, float64(c.LatMaxNs)/1e3)
			if mn := float64(c.LatMinNs) / 1e3; st.Latency.MinUs == 0 || mn < st.Latency.MinUs {
				st.Latency.MinUs = mn
			}
		}
		var sh [histBuckets]uint64
		for b := range hist {
			d := c.Hist[b] - p.Hist[b]
			hist[b] += d
			sh[b] = d
		}
		ps := &perEntry[e]
		ps.TxPackets += tx
		ps.RxPackets += rx
		ps.Late += c.Late - p.Late
		if rx > 0 {
			ps.Latency.MaxUs = max(ps.Latency.MaxUs, float64(c.LatMaxNs)/1e3)
		}
		ps.hist = addHist(ps.hist, sh)
		// Sanity of the exact count: the sink cannot have seen a sequence
		// number the generator has not sent.
		if c.Next > sent[id] {
			return nil, fmt.Errorf("stream %d: the sink saw sequence %d but only %d were sent: foreign or duplicated frames", id, c.Next-1, sent[id])
		}
	}
	st.Lost = st.TxPackets - min(st.RxPackets, st.TxPackets)
	if st.RxPackets > st.TxPackets {
		return nil, fmt.Errorf("the sink received %d frames but %d were sent in this step: duplicated frames", st.RxPackets, st.TxPackets)
	}
	if st.TxPackets > 0 {
		st.LossPct = 100 * float64(st.Lost) / float64(st.TxPackets)
	}
	st.TxPPS, st.RxPPS = float64(st.TxPackets)/dur, float64(st.RxPackets)/dur
	st.TargetBPS = rate * 8 * m.prof.MeanFrame()
	st.TxBPS, st.RxBPS = float64(st.TxBytes)*8/dur, float64(st.RxBytes)*8/dur
	st.GenLimited = rate > 0 && st.TxPPS < 0.97*rate
	if st.RxPackets > 0 {
		st.Latency.MeanUs = float64(latSum) / float64(st.RxPackets) / 1e3
	}
	st.Latency.fromHist(hist[:])
	for e := range perEntry {
		ps := &perEntry[e]
		ps.Lost = ps.TxPackets - min(ps.RxPackets, ps.TxPackets)
		if ps.TxPackets > 0 {
			ps.LossPct = 100 * float64(ps.Lost) / float64(ps.TxPackets)
		}
		ps.Latency.fromHist(ps.hist)
		ps.Share = shares[e]
	}
	st.Streams = perEntry
	st.KernelForwarded = kernelForwarded(m.forwarding)
	m.sent, m.recv = sent, recv
	return st, nil
}

func addHist(a []uint64, b [histBuckets]uint64) []uint64 {
	if a == nil {
		a = make([]uint64, histBuckets)
	}
	for i := range b {
		a[i] += b[i]
	}
	return a
}

// fromHist fills the percentiles from a histogram delta (keeping min, max
// and mean as set). A percentile is the upper bound of its bucket, capped
// by the maximum: at most 1/16 octave (about 4.4%) above the truth.
func (l *Latency) fromHist(h []uint64) {
	var total uint64
	for _, v := range h {
		total += v
	}
	if total == 0 {
		return
	}
	pct := func(q float64) float64 {
		rank := uint64(math.Ceil(q * float64(total)))
		var cum uint64
		for b, v := range h {
			cum += v
			if cum >= rank {
				_, hi := bucketBounds(b)
				us := float64(hi) / 1e3
				if l.MaxUs > 0 && us > l.MaxUs {
					us = l.MaxUs
				}
				return us
			}
		}
		return l.MaxUs
	}
	l.P50Us, l.P99Us, l.P999Us = pct(0.50), pct(0.99), pct(0.999)
	if l.MaxUs == 0 {
		// per-stream maxima come from the histogram when not tracked
		for b := len(h) - 1; b >= 0; b-- {
			if h[b] > 0 {
				_, hi := bucketBounds(b)
				l.MaxUs = float64(hi) / 1e3
				break
			}
		}
	}
}

// kernelForwarded sums ForwDatagrams of the forwarding namespaces, so a
// report shows how much of the traffic the kernel forwarded itself.
func kernelForwarded(nss []string) uint64 {
	var n uint64
	for _, ns := range nss {
		n += readForwDatagrams(ns)
	}
	return n
}

func (r *RunResult) finish() {
	r.MaxClean = 0
	best := -1.0
	for i := range r.Steps {
		s := &r.Steps[i]
		s.Clean = s.TxPackets > 0 && s.LossPct <= r.LossThreshold
		if s.Clean && s.RxPPS > best {
			best, r.MaxClean = s.RxPPS, s.Index
		}
	}
	// kernel-forwarded counts are cumulative: make them per step
	for i := len(r.Steps) - 1; i > 0; i-- {
		r.Steps[i].KernelForwarded -= min(r.Steps[i].KernelForwarded, r.Steps[i-1].KernelForwarded)
	}
	if len(r.Steps) > 0 {
		r.Steps[0].KernelForwarded -= min(r.Steps[0].KernelForwarded, r.kernelFwdBase)
	}
	for _, s := range r.Steps {
		r.TotalTx += s.TxPackets
		r.TotalRx += s.RxPackets
		r.TotalLost += s.Lost
	}
	sort.SliceStable(r.Steps, func(i, j int) bool { return r.Steps[i].Index < r.Steps[j].Index })
	r.Ceiling = r.ceiling(r.Ramp != nil)
}

func humanRate(v float64, unit string) string {
	suffix := map[string]string{"pps": "pps", "bps": "bps"}[unit]
	switch {
	case v >= 1e9:
		return strconv.FormatFloat(v/1e9, 'f', 3, 64) + " G" + suffix
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 3, 64) + " M" + suffix
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + " k" + suffix
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + " " + suffix
}
