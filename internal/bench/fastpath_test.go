// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"strings"
	"testing"

	"sluice/internal/testutil"
)

// The benchmark measures the path it names: every run of the outbound case
// is a forward, although each forward decrements the TTL of the buffer
// BPF_PROG_RUN reuses; and a batch long enough to run the TTL down is
// reported as an error, not as a number.
func TestFastpathBenchmarkMeasuresTheNamedPath(t *testing.T) {
	testutil.RequireRoot(t, "loads BPF and creates a namespace")
	res, err := Fastpath([]int{1, 16}, 600, FastpathOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"outbound-match": "forward-out", "outbound-match-sa-mirror": "forward-out", "outbound-match-sa-kernel": "forward-out", "first-packet": "forward-out", "first-packet-new-dst": "forward-out", "inbound-match": "not-forwardable",
		"esp": "esp-ah", "no-match": "not-forwardable"}
	if len(res) != 2*len(want) {
		t.Fatalf("%d results, want 2 tunnel counts x %d cases: %+v", len(res), len(want), res)
	}
	for _, r := range res {
		if want[r.Case] != r.Reason || r.NsPerPacket <= 0 {
			t.Errorf("%d tunnels, %s: %s, %.0f ns; want %s", r.Tunnels, r.Case, r.Reason, r.NsPerPacket, want[r.Case])
		}
	}

	// With per-policy counters on, a pass an IN policy covers takes the
	// full decision (to be counted); one no policy covers does not.
	res, err = Fastpath([]int{1}, 600, FastpathOptions{Cases: []string{"inbound-match", "no-match"}, Counters: true})
	if err != nil || len(res) != 2 || res[0].Reason != "inbound" || res[1].Reason != "not-forwardable" {
		t.Errorf("with counters: %+v, %v; want inbound-match inbound, no-match not-forwardable", res, err)
	}

	saved := ttlBatch
	ttlBatch = 600
	defer func() { ttlBatch = saved }()
	_, err = Fastpath([]int{1}, 600, FastpathOptions{Cases: []string{"outbound-match"}})
	if err == nil || !strings.Contains(err.Error(), "ended as ttl, not forward-out") {
		t.Fatalf("600 forwards of one TTL-255 buffer: %v; want the TTL-expired runs reported", err)
	}
}

// --stages measures the cached forward in prefixes over the live program's
// maps: every stage program takes the cache-hit path up to its step (a
// stage that left it would be an error, not a number), in order, with the
// live program beside them.
func TestFastpathStages(t *testing.T) {
	testutil.RequireRoot(t, "loads BPF and creates a namespace")
	res, err := Fastpath([]int{4}, 500, FastpathOptions{Cases: []string{"outbound-match"}, Stages: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res[1:] {
		got = append(got, r.Program)
		if r.NsPerPacket <= 0 || r.Tunnels != 4 || r.Runs != 500 {
			t.Errorf("%s: %.1f ns over %d runs at %d tunnels", r.Program, r.NsPerPacket, r.Runs, r.Tunnels)
		}
	}
	want := "stage_entry stage_config stage_parse stage_lookup stage_checks stage_redirect stage_rewrite stage_cached xdp_fastpath"
	if strings.Join(got, " ") != want || res[0].Program != "sluice" {
		t.Fatalf("rows %s after %s; want %s after sluice", strings.Join(got, " "), res[0].Program, want)
	}
}
