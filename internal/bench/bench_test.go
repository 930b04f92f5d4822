// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"sluice/internal/testutil"
)

func TestBuiltinProfiles(t *testing.T) {
	names := ListProfiles()
	for _, want := range []string{"imix-mno-1", "imix-mno-2", "imix-mno-3", "imix-mno-4", "imix-simple", "fixed-64", "fixed-1518"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("built-in profile %s missing (have %v)", want, names)
		}
	}
	for _, n := range names {
		p, err := LoadProfile(n)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if p.Name != n {
			t.Errorf("%s: file names itself %q", n, p.Name)
		}
		var sum float64
		for _, s := range p.Shares() {
			sum += s
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("%s: shares sum to %g", n, sum)
		}
	}
	// Seed 002, iMIX 1: 114 bytes at 27991 of 44166 pps.
	p, _ := LoadProfile("imix-mno-1")
	if p.Streams[0].Size != 114 || math.Abs(p.Shares()[0]-27991.0/44166) > 1e-9 || p.FrameLen(p.Streams[0]) != 114 {
		t.Errorf("imix-mno-1 entry 0: %+v share %g", p.Streams[0], p.Shares()[0])
	}
	// The simple iMIX states sizes with FCS: 64 bytes is 60 on veth.
	s, _ := LoadProfile("imix-simple")
	if s.FCS != FCSIncluded || s.FrameLen(s.Streams[0]) != 60 || math.Abs(s.Shares()[0]-7.0/12) > 1e-9 {
		t.Errorf("imix-simple: %+v", s)
	}
	if mf := s.MeanFrame(); math.Abs(mf-(7*64+4*594+1518)/12.0) > 1e-9 {
		t.Errorf("imix-simple mean frame %g", mf)
	}
	f, err := LoadProfile("fixed-200")
	if err != nil || f.FrameLen(f.Streams[0]) != 196 {
		t.Errorf("fixed-200: %+v %v", f, err)
	}
}

func TestProfileErrorsNameTheField(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"no fcs", "name: x\nstreams: [{size: 100, weight: 1}]\n", "x.yaml:1: fcs: missing"},
		{"bad size", "name: x\nfcs: included\nstreams: [{size: 40, weight: 1}]\n", "streams[0].size: 40 is outside 64-3524"},
		{"no weight", "name: x\nfcs: excluded\nstreams: [{size: 100}]\n", "streams[0]: missing weight"},
		{"both", "name: x\nfcs: excluded\nstreams: [{size: 100, weight: 1, pps: 3}]\n", "give weight or pps, not both"},
		{"unknown key", "name: x\nfcs: excluded\nstreams: [{size: 100, wieght: 1}]\n", "wieght"},
		{"bad src", "name: x\nfcs: excluded\nstreams: [{size: 100, weight: 1}]\nflows: {src: 16.0.0}\n", "flows.src"},
		{"port range", "name: x\nfcs: excluded\nstreams: [{size: 100, weight: 1}]\nflows: {sport: 65000, sport-count: 1000}\n", "flows.sport"},
		{"spread", "name: x\nfcs: excluded\nstreams: [{size: 100, weight: 1}]\nflows: {spread: clients}\n", "flows.spread: \"clients\" is not all-pairs"},
	} {
		_, err := ParseProfile([]byte(c.yaml), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
	if _, err := LoadProfile("fixed-9000"); err == nil || !strings.Contains(err.Error(), "multi-buffer") {
		t.Errorf("fixed-9000: %v", err)
	}
	if _, err := LoadProfile("no-such"); err == nil || !strings.Contains(err.Error(), "imix-mno-1") {
		t.Errorf("unknown profile should list the built-in ones: %v", err)
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]Rate{
		"2Mpps": {2e6, "pps"}, "500kpps": {5e5, "pps"}, "1.5M": {1.5e6, "pps"}, "10Gbps": {1e10, "bps"},
		"800Mbit/s": {8e8, "bps"}, "1000": {1000, "pps"},
	} {
		got, err := ParseRate("--rate-max", in)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v, want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "fast", "-1Mpps", "0", "3Xpps"} {
		if _, err := ParseRate("--rate-max", bad); err == nil || !strings.Contains(err.Error(), "--rate-max") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	p, _ := LoadProfile("fixed-1518")
	if got := (Rate{1e10, "bps"}).PPS(p); math.Abs(got-1e10/(8*1518)) > 1e-6 {
		t.Errorf("10 Gbps of 1518-byte frames = %g pps", got)
	}
}

func TestScheduleKeepsTheMixAtAnyScale(t *testing.T) {
	p, _ := LoadProfile("imix-mno-2")
	shares := p.Shares()
	s := schedule(shares, schedLen)
	if len(s) != schedLen {
		t.Fatalf("%d slots", len(s))
	}
	count := make([]int, len(shares))
	for i, e := range s {
		count[e]++
		// every prefix is within a slot or two of the mix: short
		// bursts have the profile's proportions too
		if i > 0 && i%256 == 0 {
			for k, sh := range shares {
				if d := math.Abs(float64(count[k]) - sh*float64(i)); d > 2 {
					t.Fatalf("after %d slots entry %d has %d, want %.1f", i, k, count[k], sh*float64(i))
				}
			}
		}
	}
}

func TestHistogramBucketsMatchTheSink(t *testing.T) {
	// bpf/sink.c's hist_bucket, in Go: buckets must cover every value once
	// and in order.
	bucket := func(v uint64) int {
		if v < histSub {
			return int(v)
		}
		k := 63 - leadingZeros(v)
		if k >= 40 {
			return histBuckets - 1
		}
		return (k-3)*histSub + int((v>>(k-4))&(histSub-1))
	}
	for _, v := range []uint64{0, 1, 15, 16, 17, 31, 32, 33, 1000, 15400, 1 << 20, 123456789, 1<<40 - 1} {
		b := bucket(v)
		lo, hi := bucketBounds(b)
		if v < lo || v >= hi {
			t.Errorf("%d ns falls in bucket %d = [%d, %d)", v, b, lo, hi)
		}
		if v >= 16 && float64(hi-lo)/float64(lo) > 1.0/16+1e-9 {
			t.Errorf("bucket %d is %.1f%% wide", b, 100*float64(hi-lo)/float64(lo))
		}
	}
	var prevHi uint64
	for b := 0; b < histBuckets-1; b++ {
		lo, hi := bucketBounds(b)
		if lo != prevHi {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", b, lo, prevHi)
		}
		prevHi = hi
	}
}

func leadingZeros(v uint64) int {
	n := 0
	for i := 63; i >= 0 && v&(1<<uint(i)) == 0; i-- {
		n++
	}
	return n
}

func TestPercentilesFromHistogram(t *testing.T) {
	var h [histBuckets]uint64
	// 990 samples at ~10 µs, 9 at ~100 µs, 1 at ~1 ms
	add := func(ns uint64, n uint64) {
		for b := 0; b < histBuckets; b++ {
			if lo, hi := bucketBounds(b); ns >= lo && ns < hi {
				h[b] += n
				return
			}
		}
	}
	add(10000, 990)
	add(100000, 9)
	add(1000000, 1)
	l := Latency{MaxUs: 1000}
	l.fromHist(h[:])
	near := func(got, want float64) bool { return got >= want && got <= want*1.07 }
	if !near(l.P50Us, 10) || !near(l.P99Us, 10) || !near(l.P999Us, 100) || l.MaxUs != 1000 {
		t.Errorf("percentiles %+v", l)
	}
}

// TestSinkCountsStampedFrames runs bpf/sink.c with BPF_PROG_RUN on frames
// stamped like the generator's: in order, late, foreign and out of range.
func TestSinkCountsStampedFrames(t *testing.T) {
	testutil.RequireRoot(t, "loads BPF programs")
	var objs sinkObjects
	if err := loadSinkObjects(&objs, nil); err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	frame := func(stream uint16, seq uint32, ts uint64, magic uint16) []byte {
		b := make([]byte, 60)
		binary.BigEndian.PutUint16(b[12:], 0x0800)
		b[14], b[23] = 0x45, 17
		binary.BigEndian.PutUint16(b[42:], magic)
		binary.LittleEndian.PutUint16(b[44:], stream)
		binary.LittleEndian.PutUint32(b[46:], seq)
		binary.LittleEndian.PutUint64(b[50:], ts)
		return b
	}
	runOne := func(b []byte) uint32 {
		ret, err := objs.XdpSink.Run(&ebpf.RunOptions{Data: b})
		if err != nil {
			t.Fatal(err)
		}
		return ret
	}
	const xdpDrop, xdpPass = 1, 2
	// stream 33, sequences 0 1 2 4 3 (3 is late), stamps 1000 ns apart
	for i, seq := range []uint32{0, 1, 2, 4, 3} {
		if r := runOne(frame(33, seq, 1000*uint64(i+1), 0x51ce)); r != xdpDrop {
			t.Fatalf("stamped frame: verdict %d, want XDP_DROP", r)
		}
	}
	if r := runOne(frame(33, 9, 1, 0x1234)); r != xdpPass {
		t.Errorf("foreign frame: verdict %d, want XDP_PASS", r)
	}
	if r := runOne(frame(999, 0, 1, 0x51ce)); r != xdpDrop {
		t.Errorf("impossible stream: verdict %d, want XDP_DROP", r)
	}
	s := &Sink{objs: objs}
	snap, err := s.Snapshot([]uint16{33}, false)
	if err != nil {
		t.Fatal(err)
	}
	c := snap.Streams[33]
	if c.Packets != 5 || c.Bytes != 300 || c.Late != 1 || c.Next != 5 || c.TsBackwards != 0 {
		t.Errorf("stream 33: packets %d bytes %d late %d next %d backwards %d", c.Packets, c.Bytes, c.Late, c.Next, c.TsBackwards)
	}
	if snap.Other != 1 || snap.BadStream != 1 {
		t.Errorf("other %d, bad stream %d", snap.Other, snap.BadStream)
	}
	var hist uint64
	for _, v := range c.Hist {
		hist += v
	}
	if hist != 5 || c.LatMinNs == 0 || c.LatMaxNs < c.LatMinNs {
		t.Errorf("histogram holds %d, min %d max %d", hist, c.LatMinNs, c.LatMaxNs)
	}
	// an in-order frame stamped before its predecessor
	runOne(frame(33, 5, 10, 0x51ce))
	snap, _ = s.Snapshot([]uint16{33}, true)
	if snap.Streams[33].TsBackwards != 1 {
		t.Errorf("a stamp that went back in time was not counted")
	}
	snap, _ = s.Snapshot([]uint16{33}, false)
	if snap.Streams[33].LatMaxNs != 0 || snap.Streams[33].Packets != 6 {
		t.Errorf("reset of the extremes: %+v", snap.Streams[33].LatMaxNs)
	}
}

// TestIperfStatsOnRecordedRuns checks the ConnectX-6 SR-IOV guide's statistics against a hand
// computation over three recorded `iperf3 --bidi --parallel 2 --json` runs
// (testdata/iperf3, taken in a forwarder lab).
func TestIperfStatsOnRecordedRuns(t *testing.T) {
	var runs []IperfRun
	for _, f := range []string{"run1.json", "run2.json", "run3.json"} {
		b, err := os.ReadFile("testdata/iperf3/" + f)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseIperf3(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		runs = append(runs, r)
	}
	// end.sum_received and end.sum_received_bidir_reverse of each file
	want := []float64{422392877.503576, 610321911.986099, 988020729.4998636, 966747555.898192, 3896866559.2192373, 5025285750.983144}
	got := []float64{runs[0].ForwardBPS, runs[0].ReverseBPS, runs[1].ForwardBPS, runs[1].ReverseBPS, runs[2].ForwardBPS, runs[2].ReverseBPS}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("value %d: %v, want %v", i, got[i], want[i])
		}
	}
	// By hand: sum 11909635385.09, mean 1984939230.85; squared deviations
	// sum to 1.92608e19; / (6-1) -> variance 3.85217e18; sd 1962694970.51.
	s := IperfStats(runs)
	if s.N != 6 || math.Abs(s.MeanBPS-1984939230.848352) > 1e-3 || math.Abs(s.StdDevBPS-1962694970.5139108) > 1e-3 {
		t.Errorf("n %d mean %.6f sd %.6f", s.N, s.MeanBPS, s.StdDevBPS)
	}
	// population would be smaller by sqrt(5/6): make sure it is not that
	if _, pop := meanStd(got, 0); math.Abs(s.StdDevBPS-pop) < 1e6 {
		t.Error("iperf3 must use the sample standard deviation")
	}
	if _, err := ParseIperf3([]byte(`{"end":{},"error":"unable to connect to server: Connection timed out"}`)); err == nil || !strings.Contains(err.Error(), "unable to connect") {
		t.Errorf("iperf3 error not reported: %v", err)
	}
}

func TestParsePing(t *testing.T) {
	b, err := os.ReadFile("testdata/ping-flood.txt")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParsePing(string(b))
	if err != nil {
		t.Fatal(err)
	}
	// rtt min/avg/max/mdev = 0.007/0.007/0.258/0.006 ms; mdev is the
	// population standard deviation
	if s.Sent != 2000 || s.Received != 2000 || s.MinUs != 7 || s.MeanUs != 7 || s.MaxUs != 258 || s.StdDevUs != 6 {
		t.Errorf("%+v", s)
	}
	if _, err := ParsePing("3 packets transmitted, 0 received, 100% packet loss"); err == nil || !strings.Contains(err.Error(), "none of 3") {
		t.Errorf("unanswered ping: %v", err)
	}
}

func TestTRexProfileIsPythonWithTheMix(t *testing.T) {
	p, _ := LoadProfile("imix-simple")
	b, err := TRexProfile(p, TRexOptions{Tunnels: 300, TotalPPS: 1.2e6})
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	// sizes without FCS, pps shares of 1.2 Mpps at 7:4:1
	for _, want := range []string{`{"size": 60, "pps": 700000}`, `{"size": 590, "pps": 400000}`, `{"size": 1514, "pps": 100000}`,
		`min_value="16.0.0.1", max_value="16.0.1.0"`, `STLVmFlowVar(name="dst", value_list=DESTINATIONS, size=4, op="inc")`, "DESTINATIONS = [805306369, 805306625, ", "def register():"} {
		if !strings.Contains(s, want) {
			t.Errorf("profile lacks %s:\n%s", want, s)
		}
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 absent: cannot check the syntax")
	}
	f := t.TempDir() + "/p.py"
	os.WriteFile(f, b, 0o644)
	if out, err := exec.Command(py, "-c", "import ast,sys; ast.parse(open(sys.argv[1]).read())", f).CombinedOutput(); err != nil {
		t.Errorf("not valid Python: %v\n%s", err, out)
	}
}
