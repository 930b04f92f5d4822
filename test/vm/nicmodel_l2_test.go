// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"fmt"
	"testing"
)

// TestNicmodelTunnelWithoutL2 is the host's own socketless traffic into a
// packet-offloaded tunnel-mode SA: a VXLAN device's ARP, which
// xfrm_dev_direct_output (6.12.95 and 7.3) hands the port with an
// Ethernet header it never wrote. The model must classify it by
// skb->protocol and write the outer header itself, with the MAC of the
// neighbour of the SA's outer destination (kmod/nicmodel/neigh.c, as
// mlx5e_ipsec_init_macs); unresolved, it starts resolution and drops the
// frame (tx_ipsec_drop_no_neigh). Before, the frames left in clear
// behind stale bytes and B's port counted them as non-IP.
func TestNicmodelTunnelWithoutL2(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	for _, v6 := range []bool{false, true} {
		name := map[bool]string{false: "ipv4", true: "ipv6"}[v6]
		t.Run(name, func(t *testing.T) {
			h := l.newNMHosts(t, v6, true)
			h.install(t, ip, nmKeys())
			h.vxlan(t)
			step(t, "the VXLAN's ARP and pings are encrypted by the model, nothing else crosses", func(t *testing.T) {
				a0, b0 := ethStats(t, h.nsA, h.devA), ethStats(t, h.nsB, h.devB)
				if out, err := try("ip", "netns", "exec", h.nsA, "ping", "-c", "4", "-i", "0.2", "-W", "2", "10.80.0.2"); err != nil {
					t.Fatalf("ping over VXLAN through the tunnel: %v\n%s\nA: %v\nB: %v", err, out,
						ethStats(t, h.nsA, h.devA), ethStats(t, h.nsB, h.devB))
				}
				da := statDelta(a0, ethStats(t, h.nsA, h.devA), "tx_ipsec_packets", "tx_non_ip_packets", "tx_cleartext_packets")
				db := statDelta(b0, ethStats(t, h.nsB, h.devB), "rx_non_ip_packets")
				if da["tx_ipsec_packets"] < 5 || da["tx_non_ip_packets"] != 0 || da["tx_cleartext_packets"] != 0 {
					t.Errorf("A's port for an ARP and 4 pings over VXLAN: %v, want >= 5 encrypted, 0 non-IP, 0 cleartext", da)
				}
				// Not rx_cleartext_packets: the ports' own IPv6 link-local
				// traffic (ND, MLD, router solicitations) counts there,
				// while A's tx counts it apart (tx_link_local_packets).
				if db["rx_non_ip_packets"] != 0 {
					t.Errorf("B's port took %v from the wire, want no non-IP frame (no ARP on the link: its neighbours are permanent)", db)
				}
			})
			step(t, "an unresolved outer neighbour: resolved by the model, the frame meanwhile dropped", func(t *testing.T) {
				run(t, "ip", "-n", h.nsA, "neigh", "del", h.linkB, "dev", h.devA)
				run(t, "ip", "-n", h.nsA, "neigh", "flush", "dev", "vx0")
				a0 := ethStats(t, h.nsA, h.devA)
				if out, err := try("ip", "netns", "exec", h.nsA, "ping", "-c", "3", "-i", "0.5", "-W", "3", "10.80.0.2"); err != nil {
					t.Fatalf("ping over VXLAN once the model resolved B: %v\n%s\nA: %v", err, out, ethStats(t, h.nsA, h.devA))
				}
				if d := statDelta(a0, ethStats(t, h.nsA, h.devA), "tx_ipsec_drop_no_neigh"); d["tx_ipsec_drop_no_neigh"] < 1 {
					t.Errorf("tx_ipsec_drop_no_neigh rose by %d with B's link address unresolved, want >= 1", d["tx_ipsec_drop_no_neigh"])
				}
				if nb := run(t, "ip", "-n", h.nsA, "neigh", "show", h.linkB, "dev", h.devA); nb == "" {
					t.Errorf("A has no neighbour entry for %s on %s after the model asked for it", h.linkB, h.devA)
				}
			})
		})
	}
}

// vxlan gives each host a VXLAN device between its tunnel-mode inner
// addresses (so every VXLAN frame is the SA's), 10.80.0.1 and .2 on it,
// without IPv6 on the device (no ND or MLD of its own).
func (h nmHosts) vxlan(t *testing.T) {
	t.Helper()
	for i, e := range [][3]string{{h.nsA, h.innerA, h.innerB}, {h.nsB, h.innerB, h.innerA}} {
		run(t, "ip", "-n", e[0], "link", "add", "vx0", "type", "vxlan", "id", "80", "local", e[1], "remote", e[2], "dstport", "4789")
		run(t, "ip", "netns", "exec", e[0], "sysctl", "-qw", "net.ipv6.conf.vx0.disable_ipv6=1")
		run(t, "ip", "-n", e[0], "addr", "add", fmt.Sprintf("10.80.0.%d/24", i+1), "dev", "vx0")
		run(t, "ip", "-n", e[0], "link", "set", "vx0", "up")
	}
}
