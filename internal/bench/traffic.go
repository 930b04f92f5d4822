// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"sluice/internal/lab"
)

// Limits shared with bpf/gen.c and bpf/sink.c.
const (
	maxEntries  = 32   // GEN_MAX_ENTRIES
	maxGenCPUs  = 8    // GEN_MAX_CPUS
	schedLen    = 4096 // GEN_SCHED_LEN
	maxDsts     = 65536
	maxStreams  = maxEntries * maxGenCPUs // SINK_MAX_STREAMS
	histBuckets = 592                     // SINK_HIST_BUCKETS
	histSub     = 16                      // SINK_HIST_SUB
)

// xdpMD is struct xdp_md, the context of BPF_PROG_RUN.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// Generator sends a profile's frames from the lab's generator port with XDP
// live frames, paced from user space, one thread per CPU.
type Generator struct {
	objs    genObjects
	port    link.Link
	park    link.Link
	prof    *Profile
	ends    lab.Ends
	ifindex int
	frame   []byte
	cpus    []int
	ncpu    int // possible CPUs (per-CPU map width)
}

// checkGenCPUs checks the generator's CPUs before anything is built: at
// least one, each a CPU of this machine below GEN_MAX_CPUS, none twice.
func checkGenCPUs(cpus []int) error {
	if len(cpus) == 0 {
		return errors.New("--gen-cpus: give at least one CPU")
	}
	seen := map[int]bool{}
	for _, c := range cpus {
		if c < 0 || c >= maxGenCPUs || c >= runtime.NumCPU() {
			return fmt.Errorf("--gen-cpus: CPU %d is not between 0 and %d", c, min(maxGenCPUs, runtime.NumCPU())-1)
		}
		if seen[c] {
			return fmt.Errorf("--gen-cpus: CPU %d is listed twice", c)
		}
		seen[c] = true
	}
	return nil
}

// NewGenerator loads bpf/gen.c, attaches its port program to the
// generator's port and fills the templates. cpus are the CPUs the sending
// threads are pinned to (each below 8).
func NewGenerator(ends lab.Ends, prof *Profile, cpus []int) (*Generator, error) {
	if err := checkGenCPUs(cpus); err != nil {
		return nil, err
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	g := &Generator{prof: prof, ends: ends, cpus: cpus, ncpu: ncpu}
	if err := loadGenObjects(&g.objs, nil); err != nil {
		return nil, fmt.Errorf("loading bpf/gen.c: %w", err)
	}
	if err := g.setup(); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

func (g *Generator) setup() error {
	src, err := net.ParseMAC(g.ends.GenMAC)
	if err != nil {
		return err
	}
	dst, err := net.ParseMAC(g.ends.FirstHopMAC)
	if err != nil {
		return err
	}
	p := g.prof
	maxLen := 0
	for i, s := range p.Streams {
		l := p.FrameLen(s)
		maxLen = max(maxLen, l)
		var e genGenEntry
		e.FrameLen = uint32(l)
		hdr := e.Hdr[:]
		copy(hdr[0:6], dst)
		copy(hdr[6:12], src)
		binary.BigEndian.PutUint16(hdr[12:14], 0x0800)
		ip := hdr[14:34]
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:4], uint16(l-14))
		binary.BigEndian.PutUint16(ip[6:8], 0x4000) // DF
		ip[8] = 64
		ip[9] = 17
		udp := hdr[34:42]
		binary.BigEndian.PutUint16(udp[4:6], uint16(l-34))
		// addresses, ports and the IP checksum are written per frame;
		// the UDP checksum stays 0 (none, allowed for IPv4)
		if err := g.objs.GenEntries.Put(uint32(i), e); err != nil {
			return err
		}
	}
	sched := schedule(p.Shares(), schedLen)
	for i, e := range sched {
		if err := g.objs.GenSched.Put(uint32(i), uint32(e)); err != nil {
			return err
		}
	}
	dsts := Destinations(g.ends.Tunnels, p.Flows.DstHosts)
	for i, d := range dsts {
		if err := g.objs.GenDsts.Put(uint32(i), binary.BigEndian.Uint32(d.AsSlice())); err != nil {
			return err
		}
	}
	fsrc := netip.MustParseAddr(p.Flows.Src).As4()
	cfg := genGenConfig{
		Nentries: uint32(len(p.Streams)), SchedLen: uint32(len(sched)),
		SrcIp: binary.BigEndian.Uint32(fsrc[:]), SrcCount: uint32(p.Flows.SrcCount),
		Ndsts: uint32(len(dsts)),
		Sport: uint16(p.Flows.SPort), SportCount: uint16(p.Flows.SPortCount),
		Dport: uint16(p.Flows.DPort), DportCount: uint16(p.Flows.DPortCount),
		MaxLen: uint32(maxLen),
	}
	if p.Flows.Spread == SpreadPerClient {
		cfg.PerClient = 1
	}
	if err := g.objs.GenCfg.Put(uint32(0), cfg); err != nil {
		return err
	}
	g.frame = make([]byte, maxLen)
	return lab.DoIn(g.ends.GenNS, func() error {
		ifc, err := net.InterfaceByName(g.ends.GenIf)
		if err != nil {
			return err
		}
		g.ifindex = ifc.Index
		g.port, err = link.AttachXDP(link.XDPOptions{Program: g.objs.XdpGenPort, Interface: ifc.Index, Flags: link.XDPDriverMode})
		if err != nil {
			return fmt.Errorf("attaching the generator's port program to %s: %w", g.ends.GenIf, err)
		}
		// Keep xdp_gen in the XDP dispatcher (see lab.ParkIf): its port is
		// down and receives nothing.
		park, err := net.InterfaceByName(lab.ParkIf)
		if err != nil {
			return fmt.Errorf("the lab has no %s in %s: take it down and up again (%w)", lab.ParkIf, g.ends.GenNS, err)
		}
		g.park, err = link.AttachXDP(link.XDPOptions{Program: g.objs.XdpGen, Interface: park.Index, Flags: link.XDPGenericMode})
		if err != nil {
			return fmt.Errorf("attaching the generator to %s: %w", lab.ParkIf, err)
		}
		return nil
	})
}

// Destinations are the generator's destination addresses: hosts .1 to
// .hosts of every tunnel's subnet, interleaved so that consecutive flows go
// to different tunnels.
func Destinations(tunnels, hosts int) []netip.Addr {
	var out []netip.Addr
	for h := 1; h <= hosts; h++ {
		for t := 1; t <= tunnels; t++ {
			if len(out) == maxDsts {
				return out
			}
			b := lab.TunnelSubnet(t).Addr().As4()
			b[3] = byte(h)
			out = append(out, netip.AddrFrom4(b))
		}
	}
	return out
}

// schedule spreads the shares over n slots with smooth weighted round
// robin, so that a short burst already has the profile's mix.
func schedule(shares []float64, n int) []int {
	out := make([]int, 0, n)
	cur := make([]float64, len(shares))
	for len(out) < n {
		best := 0
		for i, s := range shares {
			cur[i] += s
			if cur[i] > cur[best] {
				best = i
			}
		}
		cur[best]--
		out = append(out, best)
	}
	return out
}

// SentStream is how many frames one stream has sent.
type SentStream struct {
	Stream uint16
	Entry  int
	Sent   uint64
}

// Sent reads the frames sent so far, per stream.
func (g *Generator) Sent() (map[uint16]uint64, error) {
	out := map[uint16]uint64{}
	for e := range g.prof.Streams {
		var per []uint64
		if err := g.objs.GenSent.Lookup(uint32(e), &per); err != nil {
			return nil, err
		}
		for cpu, v := range per {
			if v > 0 {
				out[uint16(cpu*maxEntries+e)] = v
			}
		}
	}
	return out, nil
}

// Errors is the number of frames the program could not build (must be 0).
func (g *Generator) Errors() uint64 {
	var per []uint64
	if g.objs.GenErrors.Lookup(uint32(0), &per) != nil {
		return 0
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n
}

// Send sends at ratePPS (0: as fast as possible) for d, split evenly over
// the generator's CPUs. It returns when every thread is done.
func (g *Generator) Send(ctx context.Context, ratePPS float64, d time.Duration) error {
	var wg sync.WaitGroup
	errs := make([]error, len(g.cpus))
	for i, cpu := range g.cpus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = lab.DoIn(g.ends.GenNS, func() error {
				var set unix.CPUSet
				set.Set(cpu)
				if err := unix.SchedSetaffinity(0, &set); err != nil {
					return fmt.Errorf("pinning the generator to CPU %d: %w", cpu, err)
				}
				return g.sendThread(ctx, ratePPS/float64(len(g.cpus)), d)
			})
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (g *Generator) sendThread(ctx context.Context, rate float64, d time.Duration) error {
	opts := &ebpf.RunOptions{
		Data:      g.frame,
		Flags:     unix.BPF_F_TEST_XDP_LIVE_FRAMES,
		Context:   xdpMD{DataEnd: uint32(len(g.frame)), IngressIfindex: uint32(g.ifindex)},
		BatchSize: 64,
	}
	start := time.Now()
	pace := pacer{rate: rate}
	for {
		el := time.Since(start)
		if el >= d || ctx.Err() != nil {
			return nil
		}
		n, wait := pace.next(el)
		if n == 0 {
			time.Sleep(min(wait, d-el))
			continue
		}
		opts.Repeat = uint32(n)
		if _, err := g.objs.XdpGen.Run(opts); err != nil {
			return fmt.Errorf("BPF_PROG_RUN (live frames): %w", err)
		}
	}
}

const minChunk, maxChunk = 64, 16384

// pacer spreads a rate (0: as fast as possible) over BPF_PROG_RUN calls
// of at most ~2 ms of traffic each, which keeps the pacing smooth.
type pacer struct {
	rate float64
	sent float64 // frames the schedule counts as sent
}

// next returns how many frames to send at elapsed time el, or 0 and how
// long to wait. A thread the scheduler held back does not catch up in a
// burst: at a rate the device under test carries, the burst would overflow
// its queues, and the loss would be blamed on the device. Beyond two
// chunks of debt the schedule slips instead, and the step reports the
// shortfall (generator_limited).
func (p *pacer) next(el time.Duration) (int, time.Duration) {
	if p.rate <= 0 {
		return maxChunk, 0
	}
	chunk := min(max(minChunk, p.rate*0.002), maxChunk)
	due := p.rate*el.Seconds() - p.sent
	if due > 2*chunk {
		p.sent += due - 2*chunk
		due = 2 * chunk
	}
	if due < minChunk {
		return 0, time.Duration((minChunk - due) / p.rate * float64(time.Second))
	}
	n := int(min(due, chunk))
	p.sent += float64(n)
	return n, 0
}

// Close detaches and unloads.
func (g *Generator) Close() {
	for _, l := range []link.Link{g.port, g.park} {
		if l != nil {
			l.Close()
		}
	}
	g.objs.Close()
}

// Sink counts the generator's frames on the lab's sink port.
type Sink struct {
	objs sinkObjects
	lk   link.Link
}

// NewSink loads bpf/sink.c and attaches it to the sink port.
func NewSink(ends lab.Ends) (*Sink, error) {
	s := &Sink{}
	if err := loadSinkObjects(&s.objs, nil); err != nil {
		return nil, fmt.Errorf("loading bpf/sink.c: %w", err)
	}
	err := lab.DoIn(ends.SinkNS, func() error {
		ifc, err := net.InterfaceByName(ends.SinkIf)
		if err != nil {
			return err
		}
		s.lk, err = link.AttachXDP(link.XDPOptions{Program: s.objs.XdpSink, Interface: ifc.Index, Flags: link.XDPDriverMode})
		if err != nil {
			return fmt.Errorf("attaching the sink to %s: %w", ends.SinkIf, err)
		}
		return nil
	})
	if err != nil {
		s.objs.Close()
		return nil, err
	}
	return s, nil
}

// Close detaches and unloads.
func (s *Sink) Close() {
	if s.lk != nil {
		s.lk.Close()
	}
	s.objs.Close()
}

// StreamCounters are one stream's sink counters, summed over CPUs.
type StreamCounters struct {
	Packets, Bytes, Late, TsBackwards uint64
	LatSumNs, LatMaxNs, LatMinNs      uint64
	Hist                              [histBuckets]uint64
	// Next is the highest sequence number received + 1.
	Next uint64
}

// SinkSnapshot is the sink's counters at one moment.
type SinkSnapshot struct {
	Streams map[uint16]*StreamCounters
	// Other counts frames that were not the generator's (passed to the
	// kernel); BadStream stamps with an impossible stream id.
	Other, BadStream uint64
}

// Snapshot reads the counters of the given streams. With resetExtremes it
// then zeroes the latency minimum and maximum, so the next snapshot's are
// those of the traffic in between: call it only while no traffic flows.
func (s *Sink) Snapshot(streams []uint16, resetExtremes bool) (*SinkSnapshot, error) {
	snap := &SinkSnapshot{Streams: map[uint16]*StreamCounters{}}
	for _, st := range streams {
		var per []sinkSinkStats
		if err := s.objs.SinkStat.Lookup(uint32(st), &per); err != nil {
			return nil, err
		}
		c := &StreamCounters{}
		for i := range per {
			v := &per[i]
			c.Packets += v.Packets
			c.Bytes += v.Bytes
			c.Late += v.Late
			c.TsBackwards += v.TsBackwards
			c.LatSumNs += v.LatSumNs
			c.LatMaxNs = max(c.LatMaxNs, v.LatMaxNs)
			if v.LatMinNs > 0 && (c.LatMinNs == 0 || v.LatMinNs < c.LatMinNs) {
				c.LatMinNs = v.LatMinNs
			}
			for b := range v.Hist {
				c.Hist[b] += v.Hist[b]
			}
		}
		var sq sinkSinkSeq
		if err := s.objs.SinkSeqs.Lookup(uint32(st), &sq); err != nil {
			return nil, err
		}
		c.Next = sq.Next
		snap.Streams[st] = c
		if resetExtremes {
			for i := range per {
				per[i].LatMaxNs, per[i].LatMinNs = 0, 0
			}
			if err := s.objs.SinkStat.Update(uint32(st), per, ebpf.UpdateExist); err != nil {
				return nil, err
			}
		}
	}
	for k, dst := range []*uint64{&snap.Other, &snap.BadStream} {
		var per []uint64
		if err := s.objs.SinkOther.Lookup(uint32(k), &per); err == nil {
			for _, v := range per {
				*dst += v
			}
		}
	}
	return snap, nil
}

// Received sums the packets of a snapshot.
func (s *SinkSnapshot) Received() uint64 {
	var n uint64
	for _, c := range s.Streams {
		n += c.Packets
	}
	return n
}

// bucketBounds is the range of latencies [lo, hi) in ns that histogram
// bucket b holds.
func bucketBounds(b int) (lo, hi uint64) {
	if b < histSub {
		return uint64(b), uint64(b) + 1
	}
	k := uint(b/histSub + 3)
	sub := uint64(b % histSub)
	return (histSub + sub) << (k - 4), (histSub + sub + 1) << (k - 4)
}
