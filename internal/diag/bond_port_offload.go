// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"sort"
)

// checkBondPortOffload finds SAs offloaded to one port of an
// active-backup bond (the ConnectX-6 SR-IOV guide's "offload packet dev PF0" with PF0 in
// bond0): the bond does not move them at failover, and through the bond
// crypto offload never encrypts on transmit (BondPortOffloadWhy).
func checkBondPortOffload(f *Facts, _ *DoctorOptions) []Result {
	count := map[string]int{}
	packet := map[string]int{}
	for _, s := range f.States {
		if s.Offload == nil {
			continue
		}
		for _, n := range f.Netdevs {
			if n.Index == s.Offload.Ifindex && n.Master != "" {
				count[n.Name]++
				if s.Offload.Packet() {
					packet[n.Name]++
				}
			}
		}
	}
	var ports []string
	for p := range count {
		ports = append(ports, p)
	}
	sort.Strings(ports)
	release := ""
	if f.Kernel != nil {
		release = f.Kernel.Release
	}
	var rs []Result
	for _, p := range ports {
		bond := f.netdev(f.netdev(p).Master)
		if bond == nil || bond.Kind != "bond" || bond.BondMode != "active-backup" {
			continue
		}
		ev := []string{fmt.Sprintf("%d SA(s) with offload dev %s (%d packet offload); %s is a port of %s, active port %s", count[p], p, packet[p], p, bond.Name, bond.ActiveSlave)}
		if packet[p] > 0 && bond.ActiveSlave != p {
			// Failed over: seen on the NIC model (test/vm/overlay_packet_test.go).
			rs = append(rs, Result{Verdict: Fail, Subject: p,
				Summary: fmt.Sprintf("%d packet-offloaded SA(s) on %s, but %s's active port is %s: the bond moved none of them at the failover, "+
					"so the traffic leaves %s in cleartext (the kernel hands it to the bond unencrypted; %s holds no policy)", packet[p], p, bond.Name, bond.ActiveSlave, bond.ActiveSlave, bond.ActiveSlave),
				Evidence: ev, Fix: BondPacketFailoverFix(bond.Name, bond.ActiveSlave)})
			continue
		}
		rs = append(rs, Result{Verdict: Warn, Subject: p,
			Summary:  fmt.Sprintf("%d SA(s) offloaded to %s, a port of active-backup bond %s: %s", count[p], p, bond.Name, BondPortOffloadWhy(p, bond.Name)),
			Evidence: ev, Fix: BondPortOffloadFix(bond.Name, release)})
	}
	if len(rs) == 0 {
		return []Result{{Verdict: OK, Summary: "no SA offloaded to a port of an active-backup bond"}}
	}
	return rs
}
