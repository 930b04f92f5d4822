// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A VF the new driver refuses (vfio-pci without an IOMMU) goes back to
// its driver: the steps written in order, the override cleared, and the
// error saying why. A fixture tree stands in for sysfs; the VM test
// TestGuestVFIORefused does the same on a real PCI device.
func TestBindDriverRollsBack(t *testing.T) {
	root := t.TempDir()
	old := sysfsRoot
	sysfsRoot = root
	t.Cleanup(func() { sysfsRoot = old })
	dev := filepath.Join(root, "bus/pci/devices/0000:03:00.2")
	drv := filepath.Join(root, "bus/pci/drivers/mlx5_core")
	for _, d := range []string{dev, drv} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../../drivers/mlx5_core", filepath.Join(dev, "driver")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(dev, "driver_override"), filepath.Join(drv, "unbind"), filepath.Join(root, "bus/pci/drivers_probe")} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	err := BindDriver("0000:03:00.2", "vfio-pci")
	if err == nil {
		t.Fatal("bind succeeded although the driver never took the device")
	}
	for _, w := range []string{"vfio-pci refused 0000:03:00.2", "in no IOMMU group: enable the IOMMU", "rolled back: driver mlx5_core"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q: %v", w, err)
		}
	}
	read := func(p string) string { b, _ := os.ReadFile(p); return string(b) }
	if got := read(filepath.Join(dev, "driver_override")); got != "\n" {
		t.Errorf("driver_override left %q, want cleared", got)
	}
	if got := read(filepath.Join(drv, "unbind")); got != "0000:03:00.2" {
		t.Errorf("unbind got %q", got)
	}
	if got := read(filepath.Join(root, "bus/pci/drivers_probe")); got != "0000:03:00.2" {
		t.Errorf("drivers_probe got %q", got)
	}
}
