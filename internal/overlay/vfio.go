// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BindDriver moves PCI device pci to driver ("" : back to whatever the
// kernel picks, the device's own driver) the way the kernel documents for
// one device: driver_override, unbind from the current driver, then
// drivers_probe. If the new driver refuses the device (vfio-pci without an
// IOMMU: "no iommu_group"), the override is cleared and the device probed
// again, so it ends where it was, and the error says why.
func BindDriver(pci, driver string) error {
	dev := filepath.Join(sysfsRoot, "bus/pci/devices", pci)
	if _, err := os.Stat(dev); err != nil {
		return fmt.Errorf("PCI device %s: %w", pci, err)
	}
	if driver == "vfio-pci" {
		// Loads the module where it is one; built in or already loaded
		// is fine, so the error is only reported through the probe.
		_ = exec.Command("modprobe", "vfio-pci").Run()
	}
	old := readLinkBase(filepath.Join(dev, "driver"))
	write := func(path, val string) error {
		if err := os.WriteFile(path, []byte(val), 0o200); err != nil {
			return fmt.Errorf("echo %s > %s: %w", strings.TrimSpace(val), path, err)
		}
		return nil
	}
	if err := write(filepath.Join(dev, "driver_override"), driver+"\n"); err != nil {
		return err
	}
	if old != "" {
		if err := write(filepath.Join(dev, "driver", "unbind"), pci); err != nil {
			_ = write(filepath.Join(dev, "driver_override"), "\n")
			return err
		}
	}
	probeErr := write(filepath.Join(sysfsRoot, "bus/pci/drivers_probe"), pci)
	now := readLinkBase(filepath.Join(dev, "driver"))
	if driver == "" || now == driver {
		return nil
	}
	// Roll back: no override, probe again (the old driver takes it).
	_ = write(filepath.Join(dev, "driver_override"), "\n")
	_ = write(filepath.Join(sysfsRoot, "bus/pci/drivers_probe"), pci)
	back := readLinkBase(filepath.Join(dev, "driver"))
	why := "the driver did not take it"
	if probeErr != nil {
		why = probeErr.Error()
	}
	if _, err := os.Stat(filepath.Join(dev, "iommu_group")); errors.Is(err, os.ErrNotExist) && driver == "vfio-pci" {
		why += "; the device is in no IOMMU group: enable the IOMMU (intel_iommu=on or amd_iommu=on, VT-d/AMD-Vi in the firmware)"
	}
	return fmt.Errorf("%s refused %s (%s); rolled back: driver %s", driver, pci, why, orUnset(back))
}
