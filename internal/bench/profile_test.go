// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"strings"
	"testing"
)

// A traffic profile reads as gateway.yaml does (yamldoc): every problem at
// once, each as file:line: field: what is wrong; the fix.
func TestProfileErrorsReadLikeConfig(t *testing.T) {
	_, err := ParseProfile([]byte(`name: x
fcs: included
streams:
  - {size: 64, weight: -1}
  - {size: 128, wieght: 1}
flows:
  src-count: 0
  spread: clients
  dst-hosts: 300
`), "x.yaml")
	want := []string{
		`x.yaml:4: streams[0].weight: -1 is not a finite number of 0 or more; write one such as 1 or 0.5`,
		`x.yaml:5: streams[1].wieght: unknown key; the keys here are size, weight, pps`,
		`x.yaml:5: streams[1]: missing weight (or pps): the stream's share of packets`,
		`x.yaml:7: flows.src-count: 0 is out of range; use a number from 1 to 16777216`,
		`x.yaml:8: flows.spread: "clients" is not all-pairs (every source to every destination) or per-client (source i to destination i only)`,
		`x.yaml:9: flows.dst-hosts: 300 is out of range; use a number from 1 to 254`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Fatalf("errors:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}

// The flows a profile leaves out are the defaults of profileFile's tags,
// for a file and for fixed-N alike.
func TestProfileFlowDefaults(t *testing.T) {
	want := Flows{Spread: SpreadAllPairs, Src: "16.0.0.1", SrcCount: 256, DstHosts: 4, SPort: 1024, SPortCount: 64, DPort: 5001, DPortCount: 1}
	p, err := ParseProfile([]byte("name: x\nfcs: excluded\nstreams: [{size: 100, weight: 1}]\n"), "x.yaml")
	if err != nil || p.Flows != want {
		t.Fatalf("no flows: %+v %v, want %+v", p, err, want)
	}
	p, err = ParseProfile([]byte("name: x\nfcs: excluded\nstreams: [{size: 100, weight: 1}]\nflows: {dst-hosts: 9}\n"), "x.yaml")
	if want.DstHosts = 9; err != nil || p.Flows != want {
		t.Fatalf("flows with dst-hosts only: %+v %v, want %+v", p, err, want)
	}
	f, err := LoadProfile("fixed-200")
	if want.DstHosts = 4; err != nil || f.Flows != want || f.Source != "builtin:fixed-N" || f.Name != "fixed-200" {
		t.Fatalf("fixed-200: %+v %v, want flows %+v", f, err, want)
	}
}
