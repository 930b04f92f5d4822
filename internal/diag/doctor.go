// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"strings"
)

// Result is one verdict of one check about one subject, with the evidence
// it rests on and the fix.
type Result struct {
	Check    string   `json:"check"`
	Subject  string   `json:"subject,omitempty"`
	Verdict  Verdict  `json:"verdict"`
	Summary  string   `json:"summary"`
	Evidence []string `json:"evidence,omitempty"`
	Fix      string   `json:"fix,omitempty"`
}

// Check is one doctor check.
type Check struct {
	ID    string
	Title string
	Run   func(f *Facts, o *DoctorOptions) []Result
}

// DoctorOptions says what the host is meant to be.
type DoctorOptions struct {
	// WantEswitch is the eswitch mode the configuration needs ("legacy",
	// "switchdev"; "" to not check).
	WantEswitch string
	// Only runs the checks with these IDs (all when empty).
	Only []string
	// PlannedSAs are offloaded SAs a host.yaml will add (sa-budget).
	PlannedSAs []PlannedSA
}

// Checks are the doctor's checks, in the order they run and print.
var Checks = []Check{
	{"kernel-features", "kernel has ESP, GCM and XFRM", checkKernelFeatures},
	{"kernel-version", "kernel has packet offload (6.2), ICMP-error FWD lookup (6.9), per-CPU SAs (6.13)", checkKernelVersion},
	{"strongswan", "strongSwan has hw_offload = packet (5.9.10) and per-CPU SAs (6.0.2)", checkStrongSwan},
	{"esp-offload", "esp-hw-offload and tx-esp-segmentation per port", checkESPOffload},
	{"bond-offload", "bond ESP offload matches its slaves", checkBondOffload},
	{"offload-probe", "driver accepts crypto- and packet-offload SAs", checkOffloadProbe},
	{"bond-port-offload", "SAs offloaded to one port of an active-backup bond", checkBondPortOffload},
	{"driver-quirks", "packet offload that leaks on this driver and kernel (internal/driverquirk's table)", checkDriverQuirks},
	{"mlx5-tc-order", "mlx5: tc offload and IPsec packet offload on one port", checkMlx5TCOrder},
	{"mlx5-steering", "flow steering and eswitch mode", checkSteering},
	{"mtu-headroom", "overlay MTU leaves room for encapsulation and ESP", checkMTUHeadroom},
	{"sa-per-peer", "more than one SA per peer (RSS spread)", checkSAPerPeer},
	{"sa-budget", "offloaded SAs fit the NIC's SA table (per PF family)", checkSABudget},
	{"firmware", "ConnectX firmware settings", checkFirmware},
	{"xdp-mode", "XDP programs attached in native mode", checkXDPMode},
}

// Report is the doctor's answer.
type Report struct {
	Results []Result       `json:"results"`
	Overall Verdict        `json:"overall"`
	Counts  map[string]int `json:"counts"`
	// Gathering lists what could not be read (the checks that needed it
	// say so in their evidence).
	Gathering map[string]string `json:"gathering_errors,omitempty"`
}

// Diagnose runs the checks over f.
func Diagnose(f *Facts, o DoctorOptions) (*Report, error) {
	only := map[string]bool{}
	for _, id := range o.Only {
		found := false
		for _, c := range Checks {
			found = found || c.ID == id
		}
		if !found {
			return nil, fmt.Errorf("check %q: no such check (known: %s)", id, strings.Join(CheckIDs(), ", "))
		}
		only[id] = true
	}
	r := &Report{Counts: map[string]int{}, Gathering: f.Errors}
	for _, c := range Checks {
		if len(only) > 0 && !only[c.ID] {
			continue
		}
		for _, res := range c.Run(f, &o) {
			res.Check = c.ID
			r.Results = append(r.Results, res)
		}
	}
	r.Overall = OK
	for _, res := range r.Results {
		r.Counts[res.Verdict.String()]++
		if res.Verdict > r.Overall {
			r.Overall = res.Verdict
		}
	}
	return r, nil
}

// CheckIDs lists the check IDs in order.
func CheckIDs() []string {
	ids := make([]string, len(Checks))
	for i, c := range Checks {
		ids[i] = c.ID
	}
	return ids
}
