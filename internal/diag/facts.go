// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"os/exec"

	"sluice/internal/driverquirk"
	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// Facts is everything the doctor's checks look at, gathered once from the
// host (Gather) or loaded from a file saved on another host (`sluice doctor
// --save-facts` / `--facts`). Checks are functions of Facts alone, so each
// can be made to fail with a crafted Facts where the kernel or hardware
// cannot be had.
type Facts struct {
	Kernel  *kernel.Features     `json:"kernel"`
	Netdevs []kernel.NetdevFacts `json:"netdevs"`
	// Features holds each interface's ethtool features (`ethtool -k`), only
	// those the checks read.
	Features map[string]map[string]kernel.EthFeature `json:"features"`
	Devlink  []kernel.DevlinkFacts                   `json:"devlink"`
	States   []xfrm.State                            `json:"states"`
	Policies []xfrm.Policy                           `json:"policies"`
	TC       map[string][]kernel.TCFilter            `json:"tc,omitempty"`
	// Probes holds, per interface with esp-hw-offload on, what the driver
	// did with throwaway crypto- and packet-offload SAs (nil: not probed).
	Probes map[string]xfrm.OffloadProbe `json:"probes,omitempty"`
	// Firmware holds mstconfig/mlxconfig's current values per PCI address;
	// FirmwareTool is the tool used ("" when neither is installed).
	Firmware     map[string]map[string]string `json:"firmware,omitempty"`
	FirmwareTool string                       `json:"firmware_tool,omitempty"`
	// Guests holds QEMU guests, NIC interrupts and VFs (guests.go).
	Guests *GuestFacts `json:"guests,omitempty"`
	// SAFamilies maps devices whose driver has a known SA limit to the SA
	// table they share (sa_budget.go).
	SAFamilies map[string]string `json:"sa_families,omitempty"`
	// ModelProfile is the NIC model's profile parameter when the model
	// is loaded ("" otherwise, or for a model without profiles):
	// driver-quirks reads the driver table as the profile says.
	ModelProfile string `json:"nicmodel_profile,omitempty"`
	// StrongSwan is the version of the running charon (VICI), else of
	// swanctl; "" when neither answered (versions.go).
	StrongSwan string `json:"strongswan,omitempty"`
	// Errors lists what could not be gathered, by what.
	Errors map[string]string `json:"errors,omitempty"`
}

// featureNames are the ethtool features the checks read.
var featureNames = []string{"esp-hw-offload", "tx-esp-segmentation", "esp-tx-csum-hw-offload", "hw-tc-offload", "rx-gro-hw"}

// GatherOptions tunes Gather.
type GatherOptions struct {
	FS FS
	// NoProbe skips the throwaway-SA offload probe.
	NoProbe bool
	// FirmwareTools are tried in order (default mstconfig, mlxconfig).
	FirmwareTools []string
}

func (f *Facts) fail(what string, err error) {
	if f.Errors == nil {
		f.Errors = map[string]string{}
	}
	f.Errors[what] = err.Error()
}

// Gather reads the host: kernel feature probes, interfaces and their
// ethtool features, devlink, XFRM SAs and policies, tc filters on mlx5
// ports, the offload probe, and firmware settings when a tool exists.
// Whatever fails is recorded in Errors; Gather itself does not fail.
func Gather(o GatherOptions) *Facts {
	f := &Facts{Features: map[string]map[string]kernel.EthFeature{}, TC: map[string][]kernel.TCFilter{}}
	f.Kernel = kernel.ProbeFeatures()
	gatherStrongSwan(f)
	var err error
	if f.Netdevs, err = kernel.Netdevs(); err != nil {
		f.fail("interfaces", err)
	}
	for _, n := range f.Netdevs {
		all, err := kernel.EthtoolFeatures(n.Name)
		if err != nil {
			f.fail("ethtool -k "+n.Name, err)
			continue
		}
		keep := map[string]kernel.EthFeature{}
		for _, name := range featureNames {
			if v, ok := all[name]; ok {
				keep[name] = v
			}
		}
		f.Features[n.Name] = keep
		if n.Driver == "mlx5_core" {
			if tc, err := kernel.TCFilters(n.Name); err != nil {
				f.fail("tc filters "+n.Name, err)
			} else {
				f.TC[n.Name] = tc
			}
		}
	}
	if f.Devlink, err = kernel.DevlinkDevices(); err != nil {
		f.fail("devlink", err)
	}
	if f.States, err = xfrm.DumpStates(); err != nil {
		f.fail("xfrm states", err)
	}
	if f.Policies, err = xfrm.DumpPolicies(); err != nil {
		f.fail("xfrm policies", err)
	}
	if !o.NoProbe && f.Kernel.Have[kernel.FeatureESP] {
		f.Probes = map[string]xfrm.OffloadProbe{}
		for _, n := range f.Netdevs {
			if f.Features[n.Name]["esp-hw-offload"].Active {
				if n.Kind == "bond" && kernel.BondOffloadBroken(f.Kernel.Release) {
					// Adding and deleting an offloaded SA on a bond corrupts
					// the bond's state on these kernels: never probe there.
					f.Probes[n.Name] = xfrm.OffloadProbe{Skipped: fmt.Sprintf("ESP offload through a bond is broken on Linux %s (6.11-6.15: the port driver is handed the bond's device, and adding or removing an SA there corrupts the bond's state)", f.Kernel.Release)}
					continue
				}
				p, err := xfrm.ProbeOffload(n.Name)
				if err != nil {
					f.fail("offload probe "+n.Name, err)
					continue
				}
				f.Probes[n.Name] = p
			}
		}
	}
	f.gatherFirmware(o)
	if f.Guests, err = GatherGuests(o.FS, f.Netdevs); err != nil {
		f.fail("guests", err)
	}
	f.gatherSAFamilies(o.FS)
	f.ModelProfile, _ = o.FS.ReadString("/" + driverquirk.ModelProfileParam)
	return f
}

func (f *Facts) gatherFirmware(o GatherOptions) {
	tools := o.FirmwareTools
	if tools == nil {
		tools = []string{"mstconfig", "mlxconfig"}
	}
	tool := ""
	for _, t := range tools {
		if p, err := exec.LookPath(t); err == nil {
			tool = p
			break
		}
	}
	if tool == "" {
		return
	}
	f.FirmwareTool = tool
	f.Firmware = map[string]map[string]string{}
	seen := map[string]bool{}
	for _, n := range f.Netdevs {
		if n.Driver != "mlx5_core" || n.PCI == "" || seen[n.PCI] {
			continue
		}
		seen[n.PCI] = true
		out, err := exec.Command(tool, "-d", n.PCI, "q").CombinedOutput()
		if err != nil {
			f.fail(tool+" -d "+n.PCI+" q", err)
			continue
		}
		f.Firmware[n.PCI] = ParseFirmwareQuery(string(out))
	}
}

// netdev returns the named interface's facts, or nil.
func (f *Facts) netdev(name string) *kernel.NetdevFacts {
	for i := range f.Netdevs {
		if f.Netdevs[i].Name == name {
			return &f.Netdevs[i]
		}
	}
	return nil
}

func (f *Facts) feature(dev, name string) kernel.EthFeature { return f.Features[dev][name] }
