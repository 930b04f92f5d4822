// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// SALimit is how many offloaded SAs one SA table of a driver holds, and
// who shares that table. Known limits only: a driver that is not listed
// (mlx5: its limit is a firmware capability, not a constant in the
// driver or its documentation) is not counted.
type SALimit struct {
	Driver string `json:"driver"`
	// RX and TX are per-direction tables (0 with Total).
	RX int `json:"rx,omitempty"`
	TX int `json:"tx,omitempty"`
	// Total is one table for both directions.
	Total int `json:"total,omitempty"`
	// Scope says who shares the table.
	Scope string `json:"scope"`
	// Source is where the number comes from.
	Source string `json:"source"`
}

// saLimits is the per-driver table of known SA limits (read in Linux
// 6.12's drivers, and the ixgbevf VF-offload patches for the x540).
var saLimits = map[string]SALimit{
	"ixgbe": {Driver: "ixgbe", RX: 1024, TX: 1024, Scope: "the PF and all its VFs (the PF programs its VFs' SAs into its own tables)",
		Source: "82599/x540: 1024 Rx + 1024 Tx SAs shared by the PF and its VFs (the ixgbevf VF-offload patches; IXGBE_IPSEC_MAX_SA_COUNT in ixgbe_ipsec.h; also at most 128 distinct Rx IP addresses)"},
	"netdevsim": {Driver: "netdevsim", Total: 33, Scope: "one port",
		Source: "NSIM_IPSEC_MAX_SA_COUNT in drivers/net/netdevsim/netdevsim.h"},
}

func init() {
	vf := saLimits["ixgbe"]
	vf.Driver = "ixgbevf" // a VF's SAs land in its PF's tables
	saLimits["ixgbevf"] = vf
}

// SALimitOf returns the known SA limit of a driver.
func SALimitOf(driver string) (SALimit, bool) {
	l, ok := saLimits[driver]
	return l, ok
}

// SAFamily names the SA table a device's offloaded SAs land in: the PF's
// PCI address for ixgbe and its VFs (physfn), the port itself otherwise.
func (fs FS) SAFamily(netdev, driver string) string {
	switch driver {
	case "ixgbevf":
		if pf := fs.LinkBase(netdevBase(netdev) + "/device/physfn"); pf != "" {
			return "PF " + pf
		}
	case "ixgbe":
		if a := fs.PCIAddress(netdev); a != "" {
			return "PF " + a
		}
	}
	return netdev
}

// SABudget counts the offloaded SAs of one SA table: those installed and
// those a configuration adds.
type SABudget struct {
	Family  string   `json:"family"`
	Limit   SALimit  `json:"limit"`
	Devices []string `json:"devices"`
	// Installed and Planned SAs, by direction.
	InstalledRX int `json:"installed_rx"`
	InstalledTX int `json:"installed_tx"`
	PlannedRX   int `json:"planned_rx,omitempty"`
	PlannedTX   int `json:"planned_tx,omitempty"`
}

// SACount is one offloaded SA on a device, for counting.
type SACount struct {
	Dev, Driver, Family string
	Inbound             bool
	Planned             bool
}

// CountSAs groups SAs by family, for the drivers whose limit is known.
func CountSAs(sas []SACount) []SABudget {
	by := map[string]*SABudget{}
	for _, s := range sas {
		lim, ok := SALimitOf(s.Driver)
		if !ok {
			continue
		}
		b := by[s.Family]
		if b == nil {
			b = &SABudget{Family: s.Family, Limit: lim}
			by[s.Family] = b
		}
		if !slices.Contains(b.Devices, s.Dev) {
			b.Devices = append(b.Devices, s.Dev)
		}
		switch {
		case s.Planned && s.Inbound:
			b.PlannedRX++
		case s.Planned:
			b.PlannedTX++
		case s.Inbound:
			b.InstalledRX++
		default:
			b.InstalledTX++
		}
	}
	out := make([]SABudget, 0, len(by))
	for _, b := range by {
		sort.Strings(b.Devices)
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Family < out[j].Family })
	return out
}

// saWarnShare is the share of a table at which the budget warns: SAs
// come and go in pairs at rekey (the new one is added before the old one
// is deleted), so a table must keep room beyond its steady state.
const saWarnShare = 0.8

// Check grades the budget: Fail when the SAs do not fit (the driver
// refuses the rest: offload auto falls back to software, crypto fails),
// Warn above 80 % (rekeying needs room for the new SA before the old one
// goes), else OK. The summary gives the numbers per table.
func (b SABudget) Check() (Verdict, string) {
	type use struct {
		name        string
		used, limit int
	}
	var uses []use
	if b.Limit.Total > 0 {
		uses = []use{{"SAs", b.InstalledRX + b.InstalledTX + b.PlannedRX + b.PlannedTX, b.Limit.Total}}
	} else {
		uses = []use{{"Rx SAs", b.InstalledRX + b.PlannedRX, b.Limit.RX}, {"Tx SAs", b.InstalledTX + b.PlannedTX, b.Limit.TX}}
	}
	v := OK
	var parts []string
	for _, u := range uses {
		parts = append(parts, fmt.Sprintf("%d of %d %s", u.used, u.limit, u.name))
		switch {
		case u.used > u.limit:
			v = max(v, Fail)
		case float64(u.used) > saWarnShare*float64(u.limit):
			v = max(v, Warn)
		}
	}
	planned := ""
	if b.PlannedRX+b.PlannedTX > 0 {
		planned = fmt.Sprintf(" (%d installed + %d from the configuration)", b.InstalledRX+b.InstalledTX, b.PlannedRX+b.PlannedTX)
	}
	return v, fmt.Sprintf("%s (%s, shared by %s): %s%s", b.Family, b.Limit.Driver, b.Limit.Scope, strings.Join(parts, ", "), planned)
}

// SABudgetFix is the advice when a table runs out.
const SABudgetFix = "fewer offloaded SAs on this PF family: offload only the direction that gains most (offload-in: crypto, offload-out: none, as the ixgbevf VF-offload patches does for VFs), spread peers over another PF, or use offload: auto so the SAs beyond the limit fall back to software instead of failing"

// PlannedSA is an offloaded SA a configuration will add on Dev (a port,
// or a bond: counted on each of its slaves, since each holds the bond's
// SAs when it becomes active).
type PlannedSA struct {
	Dev     string
	Inbound bool
}

// gatherSAFamilies records the SA table of each device whose driver has
// a known SA limit.
func (f *Facts) gatherSAFamilies(fs FS) {
	for _, n := range f.Netdevs {
		if _, ok := SALimitOf(n.Driver); !ok {
			continue
		}
		if f.SAFamilies == nil {
			f.SAFamilies = map[string]string{}
		}
		f.SAFamilies[n.Name] = fs.SAFamily(n.Name, n.Driver)
	}
}

// saCounts lists the installed offloaded SAs and the planned ones, each
// with its device's driver and SA table.
func saCounts(f *Facts, planned []PlannedSA) []SACount {
	var out []SACount
	add := func(dev string, inbound, plan bool) {
		n := f.netdev(dev)
		if n == nil {
			return
		}
		devs := []string{dev}
		if n.Kind == "bond" {
			devs = n.Slaves
		}
		for _, d := range devs {
			nd := f.netdev(d)
			if nd == nil {
				continue
			}
			fam := f.SAFamilies[d]
			if fam == "" {
				fam = d
			}
			out = append(out, SACount{Dev: d, Driver: nd.Driver, Family: fam, Inbound: inbound, Planned: plan})
		}
	}
	for _, s := range f.States {
		if s.Offload == nil {
			continue
		}
		for _, n := range f.Netdevs {
			if n.Index == s.Offload.Ifindex {
				add(n.Name, s.Offload.Inbound(), false)
			}
		}
	}
	for _, p := range planned {
		add(p.Dev, p.Inbound, true)
	}
	return out
}

// checkSABudget counts offloaded SAs per SA table (ixgbe: the PF and its
// VFs share 1024 Rx + 1024 Tx) and warns before the table runs out.
func checkSABudget(f *Facts, o *DoctorOptions) []Result {
	var planned []PlannedSA
	if o != nil {
		planned = o.PlannedSAs
	}
	var rs []Result
	for _, b := range CountSAs(saCounts(f, planned)) {
		v, summary := b.Check()
		r := Result{Verdict: v, Subject: b.Family, Summary: summary,
			Evidence: []string{"devices: " + strings.Join(b.Devices, ", "), "limit: " + b.Limit.Source}}
		if v != OK {
			r.Fix = SABudgetFix
		}
		rs = append(rs, r)
	}
	if len(rs) == 0 {
		return []Result{{Verdict: OK, Summary: "no offloaded SA on a driver with a known SA limit (known: ixgbe/ixgbevf, netdevsim; mlx5's is a firmware capability)"}}
	}
	return rs
}
