// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"fmt"
	"net"

	"sluice/internal/kernel/xfrm"
)

// DeviceQuirks is what an offload device does differently from the
// kernel's software XFRM, as far as the fast path's promise goes: never
// redirect a frame the device will not encrypt. The driver-quirks table
// fills it per device; until then the gateway and tests set it.
type DeviceQuirks struct {
	// ExactSelectors: the device matches a non-zero selector address as
	// one address, whatever its prefix length (mlx5 in Linux 6.12,
	// ipsec_fs.c setup_fte_addr4/6; fixed upstream in 2025 by "net/mlx5e:
	// Properly match IPsec subnet addresses"). A packet to another address
	// of the subnet misses the device's policy table and leaves in
	// cleartext.
	ExactSelectors bool
}

// deviceMiss says whether the device that packet-offloads p's SA would
// send some of p's packets in cleartext, so that the program must hand
// every packet of p to the kernel (FP_F_DEVICE_MISS, reason device-miss).
// It is decided per policy, not per packet: a subnet selector's packets
// to its network address would be encrypted, but forwarding those alone
// buys nothing a user wants and one more rule to get wrong.
func deviceMiss(p *xfrm.Policy, q DeviceQuirks) bool {
	if p.Dir != xfrm.DirOut || len(p.Tmpls) != 1 {
		return false
	}
	// mlx5's TX SA rule matches the reqid alone (tx_add_rule,
	// setup_fte_reg_c4), and a template of reqid 0 sets none: its
	// packets miss the SA table. In every mlx5 version read.
	if p.Tmpls[0].Reqid == 0 {
		return true
	}
	return q.ExactSelectors && (subnet(p.Sel.Src.Addr().IsUnspecified(), p.Sel.Src.Bits(), p.Sel.Src.Addr().BitLen()) ||
		subnet(p.Sel.Dst.Addr().IsUnspecified(), p.Sel.Dst.Bits(), p.Sel.Dst.Addr().BitLen()))
}

// subnet says whether an exact-match driver narrows a selector address:
// a zero address sets no match (it matches all, as the kernel does), any
// other shorter than the full length is matched as one address.
func subnet(zero bool, bits, full int) bool {
	return !zero && bits < full
}

// deviceMissFix says why the device misses p's packets and what the user
// does about it, for the mirror's announcement.
func deviceMissFix(p *xfrm.Policy) string {
	if len(p.Tmpls) == 1 && p.Tmpls[0].Reqid == 0 {
		return "its template has reqid 0, which selects no SA on the device; give the template a non-zero reqid"
	}
	return "its driver matches selector addresses exactly, so only " + p.Sel.Src.Addr().String() + " -> " + p.Sel.Dst.Addr().String() +
		" is encrypted; use one policy per host (/32 or /128 selectors) or a kernel with the driver's subnet fix"
}

// announceDeviceMisses logs, once per policy selector, each OUT policy
// the program hands to the kernel because its device would send part of
// it in cleartext. Passing to the kernel keeps the fast path's promise,
// not the wire's: the kernel hands the packets to the same device, so
// the configuration itself leaks there and says so here (explain's
// device-miss and doctor's driver-quirks say it on demand).
func (m *Mirror) announceDeviceMisses(misses []DeviceMiss) {
	if m.announced == nil {
		m.announced = map[string]bool{}
	}
	for i := range misses {
		p := &misses[i].Policy
		key := fmt.Sprintf("%d %s %s %d", misses[i].Ifindex, p.Sel.Src, p.Sel.Dst, p.Tmpls[0].Reqid)
		if m.announced[key] {
			continue
		}
		m.announced[key] = true
		dev := fmt.Sprint("ifindex ", misses[i].Ifindex)
		if ifc, err := net.InterfaceByIndex(misses[i].Ifindex); err == nil {
			dev = ifc.Name
		}
		m.Log.Warn("this policy leaks on its offload device: the fast path passes its packets to the kernel (device-miss), but the kernel hands them to the same device, which sends them in cleartext; "+deviceMissFix(p)+" (`sluice doctor --check driver-quirks`)",
			"policy", p.Sel.Src.String()+" -> "+p.Sel.Dst.String(), "dir", "out", "device", dev)
	}
}
