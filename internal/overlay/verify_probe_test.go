// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"net/netip"
	"strings"
	"testing"
)

func TestProbeTarget(t *testing.T) {
	for in, want := range map[string]string{
		"10.1.0.0/16": "10.1.0.1", "10.1.2.128/25": "10.1.2.129", "10.1.2.3/24": "10.1.2.1",
		"10.9.9.0/31": "10.9.9.1", "fd00:1::/64": "fd00:1::1",
	} {
		got, ok := probeTarget(netip.MustParsePrefix(in))
		if !ok || got.String() != want {
			t.Errorf("probeTarget(%s) = %v %v, want %s", in, got, ok, want)
		}
	}
	if _, ok := probeTarget(netip.MustParsePrefix("10.1.0.9/32")); ok {
		t.Error("a host selector has no address to probe beside its own")
	}
}

func TestESPTxCounterNames(t *testing.T) {
	for name, want := range map[string]bool{
		"ipsec_tx_pkts": true, "tx_ipsec_packets": true, // mlx5, the NIC model
		"ipsec_tx_drop_pkts": false, "tx_ipsec_crypto_packets": false, "ipsec_rx_pkts": false,
		"tx_ipsec_bytes": false, "tx_packets": false, "tx_ipsec_drop_no_state": false,
	} {
		if got := isESPTxCounter(name); got != want {
			t.Errorf("isESPTxCounter(%s) = %v, want %v", name, got, want)
		}
	}
}

// TestPlanSubnetProbes: a probe per packet-offloaded OUT SA with a subnet
// selector, sent from this host's address in the local selector to an
// address of the remote one that is not its network address; a selector
// without a local address is a failed check that says what to do.
func TestPlanSubnetProbes(t *testing.T) {
	h, _ := load(t, quirkHost("p0", tunnelSubnets+esnOn+"      accept-leaks: [exact-selector-match]\n"))
	live := bareLive("6.12.95")
	sas := []SAStatus{{Peer: "node-b", Dir: "out", SPI: 0x1001, Got: "packet", Dev: "p0"}, {Peer: "node-b", Dir: "in", SPI: 0x1002, Got: "packet", Dev: "p0"}}

	r := &VerifyReport{OK: true, SAs: sas}
	if ps := planSubnetProbes(h, live, r); len(ps) != 0 || r.OK || !strings.Contains(r.Checks[0].Detail, "no address of this host is inside 10.0.0.0/24") {
		t.Fatalf("no local address in the selector: probes %v, checks %+v", ps, r.Checks)
	}

	live.Links[1].Addrs = []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24")}
	r = &VerifyReport{OK: true, SAs: sas}
	ps := planSubnetProbes(h, live, r)
	if len(ps) != 1 || !r.OK {
		t.Fatalf("probes %+v, checks %+v", ps, r.Checks)
	}
	if p := ps[0]; p.src.String() != "10.0.0.5" || p.dst.String() != "10.1.0.1" || p.dev != "p0" || p.spi != 0x1001 {
		t.Errorf("probe %+v: want 10.0.0.5 -> 10.1.0.1 on p0, SA 0x1001", p)
	}

	hostSel, _ := load(t, quirkHost("p0", tunnelHosts+esnOn))
	if ps := planSubnetProbes(hostSel, live, &VerifyReport{OK: true, SAs: sas}); len(ps) != 0 {
		t.Errorf("host selectors probed: %+v", ps)
	}
	crypto := []SAStatus{{Peer: "node-b", Dir: "out", SPI: 0x1001, Got: "crypto", Dev: "p0"}}
	if ps := planSubnetProbes(h, live, &VerifyReport{OK: true, SAs: crypto}); len(ps) != 0 {
		t.Errorf("crypto offload probed (the kernel matches its policies): %+v", ps)
	}
}

func TestJudgeProbe(t *testing.T) {
	p := subnetProbe{peer: "node-b", dev: "p0", spi: 0x1001, src: netip.MustParseAddr("10.0.0.5"), dst: netip.MustParseAddr("10.1.0.1")}
	for _, tc := range []struct {
		name string
		c    probeCounts
		ok   bool
		want string
	}{
		{"encrypted", probeCounts{esp: 20, hasESP: true, all: 20}, true, "encrypts the whole subnet"},
		{"cleartext", probeCounts{esp: 0, hasESP: true, all: 20}, false, "matches the selector's addresses exactly"},
		{"no ESP counter, SA counted", probeCounts{sa: 21, all: 21}, true, "SA out spi 0x1001's packet count"},
		{"no ESP counter, SA silent", probeCounts{sa: 0, all: 20}, false, "leaves in cleartext"},
		{"never reached the device", probeCounts{esp: 0, hasESP: true, all: 2}, false, "inconclusive"},
	} {
		ok, what := judgeProbe(p, tc.c)
		if ok != tc.ok || !strings.Contains(what, tc.want) {
			t.Errorf("%s: %v %q, want %v with %q", tc.name, ok, what, tc.ok, tc.want)
		}
	}
}
