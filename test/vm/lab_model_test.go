// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

// sluice lab up gateway-model: the NIC model under 'sluice gateway run',
// built by the lab alone (SAs packet-offloaded on the model port, the
// peer in software); lab status shows the model's IPsec counters, and a
// bench ping moves them with no cleartext on the wire.

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"sluice/internal/testutil"
)

type labPort struct {
	Role, Port string
	Counters   map[string]uint64
	Error      string
}

func modelStatus(t *testing.T, bin, name string) map[string]map[string]uint64 {
	t.Helper()
	var st []struct {
		Healthy bool
		Model   []labPort `json:"model_ports"`
	}
	out := run(t, bin, "lab", "status", name, "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(st) != 1 || !st[0].Healthy || len(st[0].Model) != 2 {
		t.Fatalf("lab status: want one healthy lab with two model ports:\n%s", out)
	}
	m := map[string]map[string]uint64{}
	for _, p := range st[0].Model {
		if p.Error != "" {
			t.Fatalf("%s %s: %s", p.Role, p.Port, p.Error)
		}
		m[p.Role] = p.Counters
	}
	return m
}

// TestLabGatewayModel runs the lab under both mlx5 profiles of the model
// (issue 31). Under mlx5-6.12 the device matches selector addresses
// exactly, so the lab's 10.0.0.0/8 <-> 48.0.0.0/8 tunnel would leave the
// generator's traffic in cleartext on any path: the lab says so and
// installs per-host policies instead, the configuration sluice
// recommends for that driver, and the wire carries ESP only under both.
func TestLabGatewayModel(t *testing.T) {
	requireVM(t)
	bin := sluiceBin(t)
	for _, prof := range nmProfiles {
		t.Run(prof, func(t *testing.T) { labGatewayModel(t, bin, prof) })
	}
}

func labGatewayModel(t *testing.T, bin, prof string) {
	testutil.UseNicmodelProfile(t, prof)
	const name = "gm"
	t.Cleanup(func() { try(bin, "lab", "down", name) })

	up := run(t, bin, "lab", "up", "gateway-model", "--name", name)
	mustContain(t, up, "packet-offloaded on nm0")
	mustContain(t, up, "sluice gateway running in sl-gm-dut")
	const perHost = "matches selector addresses exactly (nicmodel profile mlx5-6.12"
	if prof == testutil.ProfileMlx5_612 {
		mustContain(t, up, perHost)
		mustContain(t, up, "per-host policies 10.0.0.1 <-> 48.0.0.1")
		mustContain(t, run(t, "ip", "-n", "sl-gm-dut", "xfrm", "policy", "list", "dir", "out"), "src 10.0.0.1/32 dst 48.0.0.1/32")
	} else if strings.Contains(up, perHost) {
		t.Errorf("under %s the lab announces exact selector matching:\n%s", prof, up)
	}
	// The wire oracle: a capture of what crossed to the peer's port.
	oracle, p0 := testutil.NicWireOracle(t, "sl-gm-peer", "nm1"), ethStats(t, "sl-gm-peer", "nm1")
	flow := testutil.FlowOf("10.0.0.0/8", "48.0.0.0/8")
	text := run(t, bin, "lab", "status", name)
	mustContain(t, text, "gm dut nm0: tx_ipsec_packets=")
	mustContain(t, text, "gm peer nm1: rx_cleartext_packets=0 ")
	keys, err := os.ReadFile("/run/sluice/lab/" + name + "/model.keys")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{string(keys[:40]), string(keys[40:80])} {
		if strings.Contains(up+text, k) {
			t.Errorf("a key is printed by lab up or status")
		}
	}

	before := modelStatus(t, bin, name)
	var ping struct {
		Run struct{ Sent, Received int } `json:"run"`
	}
	out := run(t, bin, "bench", "ping", "--lab", name, "--count", "50", "--json")
	if err := json.Unmarshal([]byte(out), &ping); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if ping.Run.Sent != 50 || ping.Run.Received != 50 {
		t.Errorf("ping through the gateway and the model: %+v\n%s", ping, out)
	}
	after := modelStatus(t, bin, name)
	d := statDelta(before["dut"], after["dut"], "tx_ipsec_packets", "rx_ipsec_packets", "xdp_xmit")
	// Requests encrypted and replies decrypted by the model; some of
	// the requests came from sluice's XDP (ndo_xdp_xmit), not the kernel.
	if d["tx_ipsec_packets"] < 50 || d["rx_ipsec_packets"] < 50 || d["xdp_xmit"] < 1 {
		t.Errorf("dut's nm0 during 50 pings: %v", d)
	}
	if n := after["peer"]["rx_cleartext_packets"]; n != 0 {
		t.Errorf("%d cleartext IP packets crossed the model's wire", n)
	}
	oracle.NoCleartext(t, 0, flow, "50 pings through the gateway and the model")
	t.Logf("dut nm0 during 50 pings: %v", d)

	// TCP too: full-size segments forwarded by XDP into the model
	// (the generator host's checksum offload must be off, lab.go).
	var iperf struct {
		MeanBPS float64 `json:"mean_bps"`
		N       int     `json:"n"`
	}
	out = run(t, bin, "bench", "iperf3", "--lab", name, "--runs", "2", "--time", "1", "--parallel", "1", "--json")
	if err := json.Unmarshal([]byte(out), &iperf); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if iperf.N != 4 || iperf.MeanBPS < 1e6 {
		t.Errorf("iperf3 through the gateway and the model: %+v (want 4 values, mean > 1 Mbit/s)\n%s", iperf, out)
	}
	if n := modelStatus(t, bin, name)["peer"]["rx_cleartext_packets"]; n != 0 {
		t.Errorf("%d cleartext IP packets crossed the model's wire during iperf3", n)
	}
	oracle.NoCleartext(t, 0, flow, "iperf3 through the gateway and the model")
	if esp := testutil.Tally(oracle.Frames(t, 0), testutil.Flow{})[testutil.ESP]; esp < 50 {
		t.Errorf("the capture saw %d ESP frames, want >= 50 (is the oracle watching the wire?)", esp)
	}

	testutil.WireAgrees(t, oracle, 0, "sl-gm-peer", "nm1", p0) // the model's counters tell the capture's story
	run(t, bin, "lab", "down", name)
	if list := run(t, "ip", "netns", "list"); strings.Contains(list, "sl-"+name+"-") {
		t.Errorf("namespaces left:\n%s", list)
	}
	if _, err := os.Stat("/run/sluice/lab/" + name); !os.IsNotExist(err) {
		t.Errorf("state (keys) left: %v", err)
	}
}
