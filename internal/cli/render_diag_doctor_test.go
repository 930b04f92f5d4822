// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/diag"
	"sluice/internal/kernel"
	"sluice/internal/testutil"
)

// The text of sluice doctor's guest checks: these tests moved here from
// internal/diag with the renderer, their assertions unchanged. The host is
// built through diag's public FS and GatherGuests.

// guestFixture is the VM single-flow guide's host in miniature: QEMU guest vm1 with two
// vCPUs pinned to CPUs 4 and 5 and its vhost worker on CPU 1, a ConnectX
// queue IRQ on CPU 2, VF 0 of p0 passed through (vfio-pci) and its
// representor p0_0 in bridge br0 with the VTEP vx0.
func guestFixture(t *testing.T) (diag.FS, []kernel.NetdevFacts) {
	fs := diag.FS{Root: t.TempDir()}
	testutil.WriteFiles(t, fs.Root, map[string]string{
		"/proc/100/comm":                                "qemu-system-x86",
		"/proc/100/cmdline":                             "qemu-system-x86_64\x00-name\x00guest=vm1,debug-threads=on\x00-device\x00vfio-pci,host=0000:03:00.2",
		"/proc/100/task/101/comm":                       "CPU 0/KVM",
		"/proc/100/task/101/status":                     "Name:\tCPU 0/KVM\nCpus_allowed_list:\t4",
		"/proc/100/task/102/comm":                       "CPU 1/KVM",
		"/proc/100/task/102/status":                     "Cpus_allowed_list:\t5",
		"/proc/100/task/103/comm":                       "vhost-100",
		"/proc/100/task/103/status":                     "Cpus_allowed_list:\t1",
		"/proc/interrupts":                              "           CPU0       CPU1\n 40:          0          7  IR-PCI-MSIX-0000:03:00.0    0-edge      mlx5_comp0@pci:0000:03:00.0\n",
		"/proc/irq/40/smp_affinity_list":                "2",
		"/sys/bus/pci/devices/0000:03:00.0/msi_irqs/40": "msix",
		"/sys/class/net/p0_0/phys_port_name":            "pf0vf0",
		"/sys/bus/pci/drivers/vfio-pci/.keep":           "",
		"/sys/bus/pci/drivers/mlx5_core/.keep":          "",
	})
	link := func(target, name string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(fs.Root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(fs.Root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(fs.Root, "/sys/bus/pci/devices/0000:03:00.2"), 0o755); err != nil {
		t.Fatal(err)
	}
	link("../0000:03:00.2", "/sys/bus/pci/devices/0000:03:00.0/virtfn0")
	link("../../drivers/vfio-pci", "/sys/bus/pci/devices/0000:03:00.2/driver")
	nd := []kernel.NetdevFacts{
		{Name: "p0", Kind: "device", Driver: "mlx5_core", PCI: "0000:03:00.0", MTU: 9000},
		{Name: "p0_0", Kind: "device", Driver: "mlx5_core", Master: "br0", MTU: 8900},
		{Name: "vx0", Kind: "vxlan", Master: "br0", MTU: 8916},
		{Name: "br0", Kind: "bridge", MTU: 8900},
	}
	return fs, nd
}

func guestResults(t *testing.T, fs diag.FS, nd []kernel.NetdevFacts, check string) string {
	t.Helper()
	g, err := diag.GatherGuests(fs, nd)
	if err != nil {
		t.Fatal(err)
	}
	r, err := diag.Diagnose(&diag.Facts{Netdevs: nd, Guests: g}, diag.DoctorOptions{Only: []string{check}})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	renderDoctor(&b, r)
	return b.String()
}

func wantIn(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("missing %q in:\n%s", w, out)
		}
	}
}

func TestGuestCPUs(t *testing.T) {
	fs, nd := guestFixture(t)
	wantIn(t, guestResults(t, fs, nd, "guest-cpus"), "[ OK ] guest-cpus vm1: no vCPU shares a CPU with a vhost thread or a NIC interrupt",
		"evidence: CPU 0/KVM on CPUs 4", "evidence: vhost-100 on CPUs 1")
	// Seed 001's two pictures: the vhost worker on vCPU 0's CPU, the
	// NIC's softirq on vCPU 1's.
	testutil.WriteFiles(t, fs.Root, map[string]string{"/proc/100/task/103/status": "Cpus_allowed_list:\t4", "/proc/irq/40/smp_affinity_list": "5"})
	wantIn(t, guestResults(t, fs, nd, "guest-cpus"), "[FAIL] guest-cpus vm1: 2 vCPU/CPU conflicts: CPU 0/KVM shares CPUs 4 with vhost-100; CPU 1/KVM shares CPU 5 with IRQ 40 (mlx5_comp0@pci:0000:03:00.0)",
		"fix: pin the vCPUs")
}

func TestGuestMTU(t *testing.T) {
	fs, nd := guestFixture(t)
	wantIn(t, guestResults(t, fs, nd, "guest-mtu"), "[ OK ] guest-mtu p0_0: MTU 8900 fits VTEP vx0 (8916)")
	nd[1].MTU = 9000
	wantIn(t, guestResults(t, fs, nd, "guest-mtu"), "[FAIL] guest-mtu p0_0: guest MTU 9000 leaves no headroom: the VTEP vx0 carries 8916", "fix: ip link set p0_0 mtu 8916")
}

func TestGuestVFs(t *testing.T) {
	fs, nd := guestFixture(t)
	wantIn(t, guestResults(t, fs, nd, "guest-vf"), "[ OK ] guest-vf p0_0: representor of VF pf0vf0 is in br0", "[ OK ] guest-vf p0 vf 0 (0000:03:00.2): bound to vfio-pci")
	nd[1].Master = ""
	if err := os.Remove(filepath.Join(fs.Root, "/sys/bus/pci/devices/0000:03:00.2/driver")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../drivers/mlx5_core", filepath.Join(fs.Root, "/sys/bus/pci/devices/0000:03:00.2/driver")); err != nil {
		t.Fatal(err)
	}
	wantIn(t, guestResults(t, fs, nd, "guest-vf"), "[WARN] guest-vf p0_0: representor of VF pf0vf0 is in no bridge",
		"[FAIL] guest-vf p0 vf 0 (0000:03:00.2): guest vm1 uses this VF but it is bound to mlx5_core, not vfio-pci")
}
