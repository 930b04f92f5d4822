// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/diag"
	"sluice/internal/testutil"
)

// The text of sluice show interface topology and rx-queue topology: these
// tests moved here from internal/diag with the renderers, their assertions
// and golden files unchanged. The host they read is diag's ConnectX-7
// fixture, through diag's public FS.

var update = flag.Bool("update", false, "rewrite golden files in testdata/golden")

// diagFixture copies the tree at src into a fresh temporary directory, so
// a test can mis-pin an IRQ without touching the committed tree.
func diagFixture(t *testing.T, src string) diag.FS {
	t.Helper()
	return diag.FS{Root: testutil.CopyTree(t, src)}
}

// golden compares got with testdata/golden/name, or rewrites it with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata/golden", name), got, *update)
}

func TestTopologyGolden(t *testing.T) {
	topo, err := diag.ReadTopology(diag.FS{Root: cx7Root})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	renderTopology(&b, topo)
	golden(t, "topology.txt", b.String())
}

// Without pci.ids the IDs are still shown; a device without a driver says
// so; a multi-node host whose firmware gives no node groups the device
// under "unknown".
func TestTopologyDegraded(t *testing.T) {
	f := diagFixture(t, cx7Root)
	if err := os.Remove(filepath.Join(f.Root, "/usr/share/misc/pci.ids")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(f.Root, "/sys/bus/pci/devices/0000:4b:00.1/driver")); err != nil {
		t.Fatal(err)
	}
	testutil.WriteFiles(t, f.Root, map[string]string{"/sys/bus/pci/devices/0000:4b:00.0/numa_node": "-1"})
	topo, err := diag.ReadTopology(f)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	renderTopology(&b, topo)
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
	topo, err := diag.ReadTopology(diag.Host)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	renderTopology(&b, topo)
	for _, n := range diag.Host.Names("/sys/class/net") {
		if diag.Host.PCIAddress(n) != "" && topo.Device(n) == nil {
			t.Errorf("%s is on PCI device %s but not in the topology:\n%s", n, diag.Host.PCIAddress(n), b.String())
		}
	}
	t.Logf("\n%s", b.String())
}

func rxText(t *testing.T, f diag.FS, only ...string) (*diag.RxTopology, string) {
	t.Helper()
	rt, err := diag.ReadRxTopology(f, only)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	renderRxTopology(&b, rt)
	return rt, b.String()
}

// The seed's own command: p0 and p1 (and their VLANs) on the healthy
// host, line for line the seed's output plus the isolation and
// housekeeping verdicts.
func TestRxQueueGoldenSeed(t *testing.T) {
	_, out := rxText(t, diag.FS{Root: cx7Root}, "p0", "p1")
	golden(t, "rxq-p0-p1.txt", out)
	seedQueues, err := os.ReadFile("testdata/seed004-rxq.txt")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, string(seedQueues)) {
		t.Errorf("the queue listing differs from the ConnectX-7 benchmark's:\n%s", testutil.LineDiff(string(seedQueues), out[:min(len(out), len(seedQueues))]))
	}
}

// Every interface: p2/p3 on NUMA 1 are pinned locally but not isolated
// (the seed's host isolates node 0 only), the I350s are management ports.
func TestRxQueueGoldenAll(t *testing.T) {
	rt, out := rxText(t, diag.FS{Root: cx7Root})
	golden(t, "rxq-all.txt", out)
	if rt.Overall != diag.Warn {
		t.Errorf("overall %v, want warn", rt.Overall)
	}
}

func irqFiles(irq, aff, eff string) map[string]string {
	return map[string]string{
		"/proc/irq/" + irq + "/smp_affinity_list":       aff,
		"/proc/irq/" + irq + "/effective_affinity_list": eff,
	}
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// Mis-pinned variants of the seed host: each must produce its line and the
// right overall verdict.
func TestRxQueueMisPinned(t *testing.T) {
	for _, tc := range []struct {
		name    string
		only    []string
		files   map[string]string
		edit    func(t *testing.T, f diag.FS)
		want    []string
		overall diag.Verdict
	}{
		{
			name:    "queue on the remote NUMA node",
			only:    []string{"p0", "p1"},
			files:   irqFiles("225", "30", "30"),
			want:    []string{"[FAIL] p1: rx-3 irq:225 on cpu 30 (NUMA node 1), device is on NUMA node 0", "[WARN] p1: rx queues on CPUs 30 that are not isolated (isolated: 4-23)"},
			overall: diag.Fail,
		},
		{
			name:    "remote queue shares a CPU with the remote port",
			files:   irqFiles("225", "30", "30"),
			want:    []string{"[FAIL] p1: rx-3 irq:225 on cpu 30", "[WARN] cpu 30 serves 2 rx queues: p1 rx-3, p2 rx-6"},
			overall: diag.Fail,
		},
		{
			name:    "two queues on one CPU",
			only:    []string{"p0"},
			files:   irqFiles("178", "6", "6"),
			want:    []string{"[WARN] cpu 6 serves 2 rx queues: p0 rx-2, p0 rx-3", "[ OK ] p0: pinning and NUMA locality correct"},
			overall: diag.Warn,
		},
		{
			name:  "queue not pinned, affinity across both nodes",
			only:  []string{"p0"},
			files: irqFiles("180", "0-47", "9"),
			want: []string{
				"[WARN] p0: rx-5 irq:180 not pinned to one CPU (affinity 0-47)",
				"[WARN] p0: rx-5 irq:180 affinity 0-47 reaches beyond NUMA node 0 (cpus 0-23)",
				"[WARN] p0: rx queues on CPUs 0-3,24-47 that are not isolated",
				"[WARN] p0: rx-5 irq:180 may run on housekeeping cpu 0-3",
			},
			overall: diag.Warn,
		},
		{
			name:    "queue on a housekeeping CPU",
			only:    []string{"p0", "p1"},
			files:   irqFiles("169", "2", "2"),
			want:    []string{"[WARN] p0: rx-0 irq:169 may run on housekeeping cpu 2 (housekeeping: 0-3, the default IRQ affinity)", "[WARN] p0: rx queues on CPUs 2 that are not isolated (isolated: 4-23)"},
			overall: diag.Warn,
		},
		{
			name:    "another IRQ on a data-path CPU",
			only:    []string{"p0", "p1"},
			files:   irqFiles("103", "8", "8"),
			want:    []string{"[WARN] irq 103: nvme0q3 runs on cpu 8, which serves p0 rx-4: move it to the housekeeping CPUs 0-3"},
			overall: diag.Warn,
		},
		{
			name: "no isolation, no irqaffinity",
			only: []string{"p0", "p1"},
			files: map[string]string{
				"/sys/devices/system/cpu/isolated":  "",
				"/sys/devices/system/cpu/nohz_full": "",
				"/proc/irq/default_smp_affinity":    "ffff,ffffffff",
			},
			want: []string{
				"[INFO] no isolated CPUs (isolcpus=/nohz_full= unset)",
				"[INFO] no housekeeping CPUs set",
				"[ OK ] all rx queue IRQs use distinct CPUs",
			},
			overall: diag.Info,
		},
		{
			name: "isolation without irqaffinity: housekeeping is the rest",
			only: []string{"p0", "p1"},
			files: merge(map[string]string{"/proc/irq/default_smp_affinity": "ffff,ffffffff"},
				irqFiles("184", "1", "1")),
			want:    []string{"[WARN] p0: rx-9 irq:184 may run on housekeeping cpu 1 (housekeeping: 0-3,24-47, the CPUs not isolated)"},
			overall: diag.Warn,
		},
		{
			name: "a queue's IRQ is missing",
			only: []string{"p0"},
			edit: func(t *testing.T, f diag.FS) {
				b, err := os.ReadFile(filepath.Join(f.Root, "/proc/interrupts"))
				if err != nil {
					t.Fatal(err)
				}
				var keep []string
				for _, l := range strings.Split(string(b), "\n") {
					if !strings.HasSuffix(l, "mlx5_comp9@pci:0000:31:00.0") {
						keep = append(keep, l)
					}
				}
				testutil.WriteFiles(t, f.Root, map[string]string{"/proc/interrupts": strings.Join(keep, "\n")})
			},
			want:    []string{"[WARN] p0: rx-9 has no IRQ in /proc/interrupts (looked for mlx5_compN@pci:0000:31:00.0)", "     rx-9   irq:-      cpu:-"},
			overall: diag.Warn,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := diagFixture(t, cx7Root)
			testutil.WriteFiles(t, f.Root, tc.files)
			if tc.edit != nil {
				tc.edit(t, f)
			}
			rt, out := rxText(t, f, tc.only...)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q", w)
				}
			}
			if rt.Overall != tc.overall {
				t.Errorf("overall %v, want %v", rt.Overall, tc.overall)
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}

// The live host: the walk works and every queue of a PCI interface is
// listed.
func TestRxQueueHost(t *testing.T) {
	rt, out := rxText(t, diag.Host)
	for _, n := range rt.Nodes {
		for _, ri := range n.Interfaces {
			want := 0
			for _, q := range diag.Host.Names("/sys/class/net/" + ri.Name + "/queues") {
				if strings.HasPrefix(q, "rx-") {
					want++
				}
			}
			if ri.Lower == "" && (ri.RxQueues != want || len(ri.Queues) != want) {
				t.Errorf("%s: %d rx queues listed, sysfs has %d", ri.Name, len(ri.Queues), want)
			}
		}
	}
	t.Logf("\n%s", out)
}
