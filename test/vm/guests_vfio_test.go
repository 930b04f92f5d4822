// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/overlay"
)

// vfio-pci on the test VM, which has no IOMMU: netdevsim's VFs have
// representors but no PCI functions, so the binding is tried on a real
// PCI device nothing depends on, q35's SMBus controller. vfio-pci must
// refuse it (no IOMMU group), and sluice must put it back where it was.
func TestGuestVFIORefused(t *testing.T) {
	requireVM(t)
	var dev string
	ents, _ := os.ReadDir("/sys/bus/pci/devices")
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join("/sys/bus/pci/devices", e.Name(), "class"))
		if strings.HasPrefix(strings.TrimSpace(string(b)), "0x0c05") { // SMBus
			dev = e.Name()
		}
	}
	if dev == "" {
		t.Fatal("no SMBus controller in the VM (q35 always has one at 00:1f.3)")
	}
	driver := func() string {
		l, err := os.Readlink(filepath.Join("/sys/bus/pci/devices", dev, "driver"))
		if err != nil {
			return ""
		}
		return filepath.Base(l)
	}
	before := driver()
	if _, err := os.Stat(filepath.Join("/sys/bus/pci/devices", dev, "iommu_group")); err == nil {
		t.Fatalf("%s has an IOMMU group: this VM was not expected to have an IOMMU; the test needs revisiting", dev)
	}
	err := overlay.BindDriver(dev, "vfio-pci")
	t.Logf("%s (driver %q): %v", dev, before, err)
	if err == nil {
		t.Fatalf("vfio-pci took %s without an IOMMU", dev)
	}
	mustContain(t, err.Error(), "vfio-pci refused "+dev, "in no IOMMU group: enable the IOMMU", "rolled back")
	if after := driver(); after != before {
		t.Fatalf("driver after the refusal %q, before %q", after, before)
	}
	b, _ := os.ReadFile(filepath.Join("/sys/bus/pci/devices", dev, "driver_override"))
	if o := strings.TrimSpace(string(b)); o != "(null)" && o != "" {
		t.Fatalf("driver_override left %q", o)
	}
	mustContain(t, run(t, "lsmod"), "vfio_pci")
}
