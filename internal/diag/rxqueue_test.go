// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"encoding/json"
	"strings"
	"testing"
)

// Every interface: the JSON the CLI writes (its text is tested with the
// renderer, in internal/cli).
func TestRxQueueGoldenAllJSON(t *testing.T) {
	rt, err := ReadRxTopology(FS{Root: cx7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	j, err := json.MarshalIndent(rt, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "rxq-all.json", string(j)+"\n")
}

func TestRxQueueUnknownInterface(t *testing.T) {
	_, err := ReadRxTopology(FS{Root: cx7}, []string{"p0", "p9"})
	if err == nil || !strings.Contains(err.Error(), "interface p9") || !strings.Contains(err.Error(), "sluice show interface topology") {
		t.Fatalf("err = %v, want one naming p9 and how to list interfaces", err)
	}
}

// A VLAN named alone brings its lower device.
func TestRxQueueByVLAN(t *testing.T) {
	rt, err := ReadRxTopology(FS{Root: cx7}, []string{"p1.504"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rt.Nodes) != 1 || len(rt.Nodes[0].Interfaces) != 2 || rt.Nodes[0].Interfaces[0].Name != "p1" || rt.Nodes[0].Interfaces[1].Lower != "p1" {
		t.Fatalf("got %+v", rt.Nodes)
	}
}
