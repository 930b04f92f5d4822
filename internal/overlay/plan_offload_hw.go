// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"fmt"
	"slices"
	"strings"

	"sluice/internal/config"
	"sluice/internal/diag"
	"sluice/internal/driverquirk"
	"sluice/internal/kernel"
)

// OffloadHW is what the SA budget needs to know of a device that holds
// (or will hold) offloaded SAs: its driver and the SA table it shares
// (diag.SAFamily: an ixgbe PF and its VFs share one).
type OffloadHW struct {
	Driver, Family string
	// Quirks are the driver's rows of internal/driverquirk on this
	// kernel (the NIC model's from its profile).
	Quirks driverquirk.Set
}

// readOffloadHW fills l.OffloadHW for the file's offload devices (a
// bond's ports for a bond) and the devices of installed offloaded SAs.
func readOffloadHW(l *Live, h *config.Host) {
	l.OffloadHW = map[string]OffloadHW{}
	var devs []string
	if h.IPsec != nil {
		for _, p := range h.IPsec.Peers {
			if p.OffloadDev != "" {
				devs = append(devs, p.OffloadDev)
			}
		}
	}
	for _, s := range l.SAs {
		if s.Offload != nil {
			devs = append(devs, l.nameOf(s.Offload.Ifindex))
		}
	}
	var ports []string
	for _, d := range devs {
		ports = append(ports, l.bondPorts(d)...)
	}
	for _, d := range append(devs, ports...) {
		if _, done := l.OffloadHW[d]; done || l.link(d) == nil {
			continue
		}
		// The drivers beneath d too: an offload device named as a VLAN
		// or macvlan over a port has that port's rows (ethtool of the
		// VLAN says "802.1Q VLAN Support").
		// What could be read counts when a lower cannot (one in another
		// namespace): the rows of the drivers seen.
		drivers, _ := kernel.StackDrivers(d)
		if len(drivers) == 0 {
			continue
		}
		drv := drivers[0]
		l.OffloadHW[d] = OffloadHW{Driver: drv, Family: diag.Host.SAFamily(d, drv), Quirks: driverquirk.ForStack(drivers, l.Release, "/")}
	}
}

// bondPorts returns the live ports of bond dev (nil when dev is no bond).
func (l *Live) bondPorts(dev string) []string {
	k := l.link(dev)
	if k == nil || k.Kind != "bond" {
		return nil
	}
	var out []string
	for _, c := range l.Links {
		if c.Master == k.Index {
			out = append(out, c.Name)
		}
	}
	return out
}

// portsOf returns the devices that hold dev's SAs: the ports of a bond
// (the file's, or the live ones), else dev itself.
func (p *planner) portsOf(dev string) []string {
	if dev == p.bondName && dev != "" {
		return p.ports
	}
	if ps := p.live.bondPorts(dev); ps != nil {
		return ps
	}
	return []string{dev}
}

// bondOf returns the active-backup bond dev is a port of ("" if none),
// in the file or on the host.
func (p *planner) bondOf(dev string) string {
	if p.bondName != "" && slices.Contains(p.ports, dev) {
		return p.bondName
	}
	if k := p.live.link(dev); k != nil && k.Master != 0 {
		if m := p.live.linkByIndex(k.Master); m != nil && m.Kind == "bond" {
			return m.Name
		}
	}
	return ""
}

// bondPortOffload warns when the SAs go to one port of a bond (the
// ConnectX-6 SR-IOV guide's offload dev PF0): a failover leaves them behind
// (diag.BondPortOffloadWhy).
func (p *planner) bondPortOffload(path string, pr *config.Peer, modes map[string]string) {
	bond := p.bondOf(pr.OffloadDev)
	if bond == "" {
		return
	}
	fix := diag.BondPortOffloadFix(bond, p.live.Release)
	if modes["out"] == config.OffloadModePacket || modes["in"] == config.OffloadModePacket {
		fix = diag.BondPacketFailoverFix(bond, "")
	}
	p.note("%s: offload-dev %s is a port of active-backup bond %s: %s. Fix: %s", path, pr.OffloadDev, bond,
		diag.BondPortOffloadWhy(pr.OffloadDev, bond), fix)
}

// saBudget counts the offloaded SAs the file adds per SA table, with
// those already installed that the file does not replace, against the
// driver's known limit, and warns before the table runs out.
func (p *planner) saBudget() {
	s := p.h.IPsec
	if s == nil {
		return
	}
	hw := func(dev string) (string, string) {
		if h, ok := p.live.OffloadHW[dev]; ok {
			return h.Driver, h.Family
		}
		return "", dev
	}
	var counts []diag.SACount
	mine := map[string]bool{}
	for i := range s.Peers {
		pr := &s.Peers[i]
		mine[budgetKey(pr.Remote, pr.SPIOut)] = true
		mine[budgetKey(pr.Local, pr.SPIIn)] = true
		for _, dir := range []string{"out", "in"} {
			if pr.OffloadFor(dir) == config.OffloadModeNone {
				continue
			}
			for _, d := range p.portsOf(pr.OffloadDev) {
				drv, fam := hw(d)
				counts = append(counts, diag.SACount{Dev: d, Driver: drv, Family: fam, Inbound: dir == "in", Planned: true})
			}
		}
	}
	for _, l := range p.live.SAs {
		if l.Offload == nil || mine[budgetKey(l.Dst, l.SPI)] {
			continue
		}
		d := p.live.nameOf(l.Offload.Ifindex)
		drv, fam := hw(d)
		counts = append(counts, diag.SACount{Dev: d, Driver: drv, Family: fam, Inbound: l.Offload.Inbound()})
	}
	for _, b := range diag.CountSAs(counts) {
		v, summary := b.Check()
		if v >= diag.Warn {
			what := "nearly full"
			if v == diag.Fail {
				what = "over the limit: the SAs beyond it are refused (offload auto falls back to none for them, crypto and packet fail)"
			}
			p.note("SA budget %s: %s. Devices %s. Fix: %s", what, summary, strings.Join(b.Devices, ", "), diag.SABudgetFix)
		}
	}
}

// budgetKey identifies an SA by destination and SPI.
func budgetKey(dst fmt.Stringer, spi uint32) string { return fmt.Sprintf("%s/%#x", dst, spi) }
