package diag

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestTopologyGolden(t *testing.T) {
	topo, err := ReadTopology(FS{Root: cx7})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	topo.WriteText(&b)
	golden(t, "topology.txt", b.String())

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

// Without pci.ids the IDs are still shown; a device without a driver says
// so; a multi-node host whose firmware gives no node groups the device
// under "unknown".
func TestTopologyDegraded(t *testing.T) {
	f := fixture(t, cx7)
	if err := os.Remove(f.path("/usr/share/misc/pci.ids")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(f.path("/sys/bus/pci/devices/0000:4b:00.1/driver")); err != nil {
		t.Fatal(err)
	}
	set(t, f, map[string]string{"/sys/bus/pci/devices/0000:4b:00.0/numa_node": "-1"})
	topo, err := ReadTopology(f)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	topo.WriteText(&b)
	out := b.String()
	for _, want := range []string{
		"├── vendor: unknown [15b3]",
		"├── model:  unknown [1021]",
		"├── driver: (none)",
		"└── NUMA node unknown\n    └── 0000:4b:00.0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// The live host: whatever it has, the walk must not fail and every
// interface in /sys/class/net backed by a PCI device must appear.
func TestTopologyHost(t *testing.T) {
	topo, err := ReadTopology(Host)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	topo.WriteText(&b)
	for _, n := range Host.Names("/sys/class/net") {
		if Host.PCIAddress(n) != "" && topo.Device(n) == nil {
			t.Errorf("%s is on PCI device %s but not in the topology:\n%s", n, Host.PCIAddress(n), b.String())
		}
	}
	t.Logf("\n%s", b.String())
}
