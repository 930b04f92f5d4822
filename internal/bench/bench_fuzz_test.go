// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/profiles"
)

// FuzzParseProfile checks that an accepted traffic profile is one the
// generator can run: shares that are finite and sum to 1, frames within
// MinFrame-MaxFrame, flows within their ranges; and that it reads back the
// same from a canonical file (parse -> write -> parse).
//
//	go test -run '^$' -fuzz '^FuzzParseProfile$' -fuzztime 30s ./internal/bench/
func FuzzParseProfile(f *testing.F) {
	names, _ := fs.Glob(profiles.FS, "*.yaml")
	for _, n := range names {
		b, _ := profiles.FS.ReadFile(n)
		f.Add(b)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "bench.md"))
	if err != nil {
		f.Fatal(err)
	}
	for _, block := range bytes.Split(doc, []byte("```yaml\n"))[1:] {
		if end := bytes.Index(block, []byte("```")); end >= 0 {
			f.Add(block[:end])
		}
	}
	f.Add([]byte("name: x\nfcs: included\nstreams: [{size: 64, weight: .nan}]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseProfile(b, "fuzz.yaml")
		if err != nil {
			// Every problem names the file, and its line when it has one.
			for _, l := range strings.Split(err.Error(), "\n") {
				if p != nil || !fuzzErrorLine.MatchString(l) {
					t.Fatalf("profile %v with error %q", p, err)
				}
			}
			return
		}
		checkProfile(t, p)
		back, err := ParseProfile([]byte(profileYAML(p)), "fuzz.yaml")
		if err != nil {
			t.Fatalf("the canonical form of an accepted profile is refused: %v\n%s", err, profileYAML(p))
		}
		if !reflect.DeepEqual(back, p) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", back, p)
		}
	})
}

var fuzzErrorLine = regexp.MustCompile(`^fuzz\.yaml(:[1-9][0-9]*)?: `)

func checkProfile(t *testing.T, p *Profile) {
	t.Helper()
	if p.Name == "" || (p.FCS != FCSIncluded && p.FCS != FCSExcluded) || len(p.Streams) == 0 || len(p.Streams) > maxEntries {
		t.Fatalf("profile %+v", p)
	}
	sum := 0.0
	for i, sh := range p.Shares() {
		if math.IsNaN(sh) || sh <= 0 || sh > 1 {
			t.Fatalf("stream %d %+v has share %v", i, p.Streams[i], sh)
		}
		if l := p.FrameLen(p.Streams[i]); l < MinFrame || l > MaxFrame {
			t.Fatalf("stream %d: frame of %d bytes", i, l)
		}
		sum += sh
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Fatalf("shares sum to %v", sum)
	}
	if m := p.MeanFrame(); !(m >= MinFrame && m <= MaxFrame+fcsLen) {
		t.Fatalf("mean frame %v", m)
	}
	fl := p.Flows
	if fl.SrcCount < 1 || fl.DstHosts < 1 || fl.DstHosts > 254 || fl.SPort < 0 || fl.DPort < 0 ||
		fl.SPort+fl.SPortCount-1 > 65535 || fl.DPort+fl.DPortCount-1 > 65535 || fl.SPortCount < 1 || fl.DPortCount < 1 {
		t.Fatalf("flows %+v", fl)
	}
}

// profileYAML writes p in the profile format, every field explicit.
func profileYAML(p *Profile) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\ndescription: %s\nfcs: %s\nstreams:\n", strconv.Quote(p.Name), strconv.Quote(p.Description), p.FCS)
	for _, s := range p.Streams {
		fmt.Fprintf(&b, "  - {size: %d", s.Size)
		if s.Weight != 0 {
			fmt.Fprintf(&b, ", weight: %s", strconv.FormatFloat(s.Weight, 'g', -1, 64))
		}
		if s.PPS != 0 {
			fmt.Fprintf(&b, ", pps: %s", strconv.FormatFloat(s.PPS, 'g', -1, 64))
		}
		b.WriteString("}\n")
	}
	fl := p.Flows
	fmt.Fprintf(&b, "flows: {spread: %s, src: %q, src-count: %d, dst-hosts: %d, sport: %d, sport-count: %d, dport: %d, dport-count: %d}\n",
		fl.Spread, fl.Src, fl.SrcCount, fl.DstHosts, fl.SPort, fl.SPortCount, fl.DPort, fl.DPortCount)
	return b.String()
}

// FuzzParseRate checks --rate-max and friends: an accepted rate is finite
// and positive, and what Rate.String prints (in reports and progress
// lines) reads back as the same rate, to its printed precision.
//
//	go test -run '^$' -fuzz '^FuzzParseRate$' -fuzztime 30s ./internal/bench/
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"2Mpps", "500kpps", "1.5M", "10Gbps", "800Mbit/s", "1000", " 3 Gpps ", "-1Mpps", "0x1p4k", "Infbps", "NaN", "1e308Gpps"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate("--rate-max", s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--rate-max ") {
				t.Fatalf("error %q does not name the flag", err)
			}
			return
		}
		if !(r.Value > 0) || math.IsInf(r.Value, 0) || (r.Unit != "pps" && r.Unit != "bps") {
			t.Fatalf("%q: rate %+v", s, r)
		}
		if r.Value < 1e3 {
			return // printed without decimals
		}
		back, err := ParseRate("--rate-max", r.String())
		if err != nil {
			t.Fatalf("%q prints as %q, which reads back as %v", s, r.String(), err)
		}
		if back.Unit != r.Unit || math.Abs(back.Value-r.Value) > 0.05*r.Value {
			t.Fatalf("%q -> %q -> %+v", s, r.String(), back)
		}
	})
}

// FuzzParseIperf3 checks the iperf3 --json reader: accepted runs carry
// rates a report can hold (finite, not negative).
//
//	go test -run '^$' -fuzz '^FuzzParseIperf3$' -fuzztime 30s ./internal/bench/
func FuzzParseIperf3(f *testing.F) {
	for _, n := range []string{"run1.json", "run2.json", "run3.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "iperf3", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"end":{},"error":"unable to connect to server: Connection timed out"}`))
	f.Add([]byte(`{"end":{"sum_received":{"bits_per_second":-1},"sum_received_bidir_reverse":{"bits_per_second":2e9}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseIperf3(b)
		if err != nil {
			return
		}
		for _, v := range []float64{r.ForwardBPS, r.ReverseBPS} {
			if !(v >= 0) || math.IsInf(v, 0) {
				t.Fatalf("run %+v", r)
			}
		}
		if s := IperfStats([]IperfRun{r, r}); math.IsNaN(s.MeanBPS) || math.IsNaN(s.StdDevBPS) {
			t.Fatalf("stats %+v", s)
		}
	})
}

// FuzzParsePing checks the ping summary reader: accepted statistics are
// consistent (received <= sent, min <= mean <= max, nothing negative) and
// its errors quote at most the last three lines of the output.
//
//	go test -run '^$' -fuzz '^FuzzParsePing$' -fuzztime 30s ./internal/bench/
func FuzzParsePing(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "ping-flood.txt"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(b))
	f.Add("3 packets transmitted, 0 received, 100% packet loss")
	f.Add("5 packets transmitted, 5 packets received, 0% packet loss\nround-trip min/avg/max/stddev = 0.040/0.052/0.061/0.007 ms\n")
	f.Add("2 packets transmitted, 9 received\nrtt min/avg/max/mdev = 1.5/0.1/1.2.3/0.0 ms\n")
	f.Fuzz(func(t *testing.T, out string) {
		s, err := ParsePing(out)
		if err != nil {
			if n := strings.Count(err.Error(), `\n`); n > 2 {
				t.Fatalf("error quotes %d lines", n+1)
			}
			return
		}
		if s.Sent < 0 || s.Received < 0 || s.Received > s.Sent || !(s.MinUs >= 0) || s.MinUs > s.MeanUs || s.MeanUs > s.MaxUs ||
			!(s.StdDevUs >= 0) || math.IsInf(s.MaxUs, 0) || math.IsInf(s.StdDevUs, 0) {
			t.Fatalf("%+v", s)
		}
	})
}

// FuzzReportJSON reads report.json as `bench` tools do (the JSON Schema's
// shape): what decodes encodes and decodes to the same report, and the
// summaries and steps.csv derived from it never panic nor print NaN.
//
//	go test -run '^$' -fuzz '^FuzzReportJSON$' -fuzztime 30s ./internal/bench/
func FuzzReportJSON(f *testing.F) {
	r := threeRounds()
	r.Schema, r.Kind, r.Created = SchemaID, "compare", time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	r.Settings.Profile, _ = LoadProfile("imix-mno-1")
	r.Notes = []string{VethNote}
	b, _ := json.Marshal(r)
	f.Add(b)
	f.Add([]byte(`{"runs":[{"label":"a","steps":[{"index":1,"rx_pps":5,"clean":true}],"max_clean_step":1},null]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Report
		if err := json.Unmarshal(b, &r); err != nil {
			return
		}
		for _, run := range r.Runs {
			if run == nil {
				return // what a JSON null decodes to; Summaries does not take those
			}
		}
		for _, s := range r.Summaries() {
			if math.IsNaN(s.MaxCleanPPS) || math.IsNaN(s.RatioToFirst) || math.IsNaN(s.P99AtClean) {
				t.Fatalf("summary %+v", s)
			}
		}
		var csv bytes.Buffer
		if err := r.WriteCSV(&csv); err != nil || strings.Contains(csv.String(), "NaN") {
			t.Fatalf("steps.csv: %v\n%s", err, csv.String())
		}
		out, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		var back Report
		if err := json.Unmarshal(out, &back); err != nil || !reflect.DeepEqual(back, r) {
			t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, back, r)
		}
	})
}
