// SPDX-License-Identifier: Apache-2.0

package driverquirk

import (
	"path/filepath"
	"strings"

	"sluice/internal/fileread"
)

// The NIC model (kmod/nicmodel) reports driver "nicmodel" to ethtool and
// takes the driver it stands for from its `profile` module parameter
// (issue 31): each profile is mlx5_core at one kernel version, so the
// model and a real ConnectX read the same rows.
const (
	ModelDriver = "nicmodel"
	// ModelProfileParam is the parameter's file under the sysfs root.
	ModelProfileParam = "sys/module/nicmodel/parameters/profile"
	// ModelTXMissParam overrides the profile's TX SA miss: -1 follows
	// the profile, 0 drops the frame, 1 sends it in cleartext.
	ModelTXMissParam = "sys/module/nicmodel/parameters/tx_miss_cleartext"
)

// ModelProfiles maps a profile to the driver version it stands for:
// mlx5-6.12 is the Debian 6.12.95 source the rows were read in;
// mlx5-upstream is the newest source Debian ships (trixie-backports'
// linux 7.3.4).
var ModelProfiles = map[string]struct {
	Driver  string
	Release string
}{
	"mlx5-6.12":     {MLX5, "6.12.95"},
	"mlx5-upstream": {MLX5, "7.3.4"},
}

// ModelSoftwareProfile is the model with no driver quirk: the kernel's
// software XFRM, the reference the end-to-end VM tests run against.
const ModelSoftwareProfile = "kernel-xfrm"

// DefaultModelProfile is the model's default: the oldest kernel users
// run with packet offload.
const DefaultModelProfile = "mlx5-6.12"

// ForDevice is For, except that the NIC model's rows come from its
// profile, read under sysRoot ("/" on the host). A model without the
// parameter (built before profiles) behaves as the kernel's software
// XFRM: only the XFRM core's rows. An unknown profile reads as the
// default, the stricter one.
func ForDevice(driver, kernelRelease, sysRoot string) Set {
	if driver != ModelDriver {
		return For(driver, kernelRelease)
	}
	profile, ok := ReadModelProfile(sysRoot)
	if !ok || profile == ModelSoftwareProfile {
		s := forAs(driver, kernelRelease, "", "", kernelRelease)
		s.As = "nicmodel without profiles (software XFRM)"
		return s
	}
	s := ForModel(profile, kernelRelease)
	// The model's SA-miss switch at 0 makes it a device whose TX SA table
	// drops what no SA serves (no mlx5 read so far: in 6.12 even the
	// switchdev table's miss rule forwards to the uplink): read that
	// device, not the profile's row.
	if b, err := fileread.ReadKernel(filepath.Join(sysRoot, ModelTXMissParam), fileread.ProcLimit); err == nil && strings.TrimSpace(string(b)) == "0" {
		s = s.Without(NoTXMissRule)
		s.As += ", tx_miss_cleartext=0: SA misses dropped"
	}
	return s
}

// ForModel returns the rows of the NIC model under profile on a kernel.
func ForModel(profile, kernelRelease string) Set {
	p, ok := ModelProfiles[profile]
	if !ok {
		p = ModelProfiles[DefaultModelProfile]
	}
	s := forAs(ModelDriver, kernelRelease, p.Driver, p.Release, kernelRelease)
	s.As = "nicmodel profile " + profile + " (as " + p.Driver + " " + p.Release + ")"
	return s
}

// ReadModelProfile reads the model's profile parameter; false when the
// loaded model has none.
func ReadModelProfile(sysRoot string) (string, bool) {
	b, err := fileread.ReadKernel(filepath.Join(sysRoot, ModelProfileParam), fileread.ProcLimit)
	if err != nil {
		return "", false
	}
	p := strings.TrimSpace(string(b))
	return p, p != ""
}
