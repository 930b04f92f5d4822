// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"

	"sluice/internal/kernel"
)

// What Linux (read in 6.12: drivers/net/bonding/bond_main.c,
// net/xfrm/xfrm_device.c) does with an SA offloaded to one port of an
// active-backup bond, as the ConnectX-6 SR-IOV guide configures it (offload dev PF0):
//
//   - The bond moves, at failover, only the SAs added on the bond itself:
//     bond_change_active_slave calls bond_ipsec_del_sa_all and
//     bond_ipsec_add_sa_all over the bond's own list. An SA added on a port
//     is not in that list; it stays on that port.
//   - A crypto-offloaded SA's packets are handed to the NIC only when the
//     route's device is the SA's device (xfrm_dev_offload_ok); the route
//     goes through the bond, so transmit is encrypted in software, before
//     and after a failover (seen on netdevsim: its tx counter stays 0).
//     Receive is decrypted by the port's NIC only while that port carries
//     the traffic; on the other port the kernel decrypts in software.
//   - Taking the port down (ip link set down, ifdown, a driver reset)
//     deletes every SA and policy offloaded to it (xfrm_dev_down flushes
//     them on NETDEV_DOWN); a carrier loss (cable, switch) does not. Seen
//     on netdevsim in the test VM: after `ip link set PORT down` the SAs
//     are gone and the outbound policy drops the traffic.
//   - A packet-offloaded SA skips that device check: its packets leave
//     through whichever port is active; after a failover that port holds
//     no SA and no policy, so it sends them in cleartext, and taking the
//     port down flushes the policies too, so the traffic then leaves in
//     cleartext without any policy (both seen on the NIC model:
//     test/vm/overlay_packet_test.go).

// BondPortOffloadWhy explains the problem for an SA on port of bond.
func BondPortOffloadWhy(port, bond string) string {
	return fmt.Sprintf("the SAs are programmed into %s only and the bond does not move them at failover "+
		"(it re-offloads only SAs added on %s itself: bond_ipsec_add_sa_all); through %s, crypto offload never "+
		"encrypts on transmit (the kernel offloads only when the route's device is the SA's device) and decrypts on "+
		"receive only while %s is active; packet offload sends through the new active port, which holds no SA or policy, in cleartext; "+
		"and taking %s down (ip link set down, a driver reset) deletes the SAs and policies offloaded to it (xfrm_dev_down): "+
		"the traffic stops until they are installed again (crypto offload), or leaves in cleartext with no policy left (packet offload)",
		port, bond, bond, port, port)
}

// BondPortOffloadFix is what to do instead, on kernel release.
func BondPortOffloadFix(bond, release string) string {
	if kernel.BondOffloadBroken(release) {
		return fmt.Sprintf("on Linux %s offload through a bond is broken too (6.11-6.15): use offload: none for SAs carried by %s, "+
			"or keep the port out of a bond; on 6.16+ offload to the bond itself (offload-dev: %s), which re-installs the SAs "+
			"on the new active port at failover", release, bond, bond)
	}
	return fmt.Sprintf("offload to the bond itself (offload-dev: %s, ethtool -K %s esp-hw-offload on): it installs the SAs on "+
		"the active port and re-installs them on the new one at failover; or use offload: none. "+
		"For packet offload: %s", bond, bond, BondPacketFailoverFix(bond, ""))
}

// BondPacketFailoverFix is what to do about packet-offloaded SAs left on
// a port of bond after a failover (active: the new active port, "" if
// not known yet). A bond has no policy offload on any kernel (no
// xdo_dev_policy_add), so packet offload cannot go through it.
func BondPacketFailoverFix(bond, active string) string {
	to := "the active port"
	if active != "" {
		to = active
	}
	return fmt.Sprintf("in sluice's host file set offload: packet with offload-dev: %s (packet offload then goes to %s's active port) "+
		"and run sluice apply after every failover: it moves the SAs and policies to %s without a cleartext packet; until it runs, "+
		"the traffic leaves in cleartext. No such window: offload: crypto on the port (it decrypts while its port is active; "+
		"transmit through the bond is encrypted in software, so a failover leaks nothing) or offload: none", bond, bond, to)
}
