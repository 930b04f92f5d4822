// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"encoding/json"
	"strings"
	"testing"
)

// The JSON the CLI writes (its text is tested with the renderer, in
// internal/cli).
func TestTopologyGoldenJSON(t *testing.T) {
	topo, err := ReadTopology(FS{Root: cx7})
	if err != nil {
		t.Fatal(err)
	}
	j, err := json.MarshalIndent(topo, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "topology.json", string(j)+"\n")
}

func TestTopologyGroupsByNUMA(t *testing.T) {
	topo, err := ReadTopology(FS{Root: cx7})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]string{0: {"0000:31:00.0", "0000:31:00.1", "0000:4b:00.0", "0000:4b:00.1"}, 1: {"0000:b1:00.0", "0000:b1:00.1"}}
	for n, addrs := range want {
		node := topo.Node(n)
		if node == nil {
			t.Fatalf("no NUMA node %d", n)
		}
		var got []string
		for _, d := range node.Devices {
			got = append(got, d.Address)
		}
		if strings.Join(got, " ") != strings.Join(addrs, " ") {
			t.Errorf("node %d: devices %v, want %v (the NVMe drive and host bridge are not network devices)", n, got, addrs)
		}
	}
	if d := topo.Device("p2"); d == nil || d.Model != "MT2910 Family [ConnectX-7]" || d.Driver != "mlx5_core" {
		t.Errorf("p2: %+v", d)
	}
}
