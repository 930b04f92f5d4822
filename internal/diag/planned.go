// SPDX-License-Identifier: Apache-2.0

package diag

import "sluice/internal/config"

// PlannedSAsOf lists the offloaded SAs host.yaml h will add, per device, so
// that sa-budget counts them with those installed (doctor -f). offload
// auto counts as offloaded: the worst case for the table.
func PlannedSAsOf(h *config.Host) []PlannedSA {
	if h.IPsec == nil {
		return nil
	}
	var out []PlannedSA
	for i := range h.IPsec.Peers {
		pr := &h.IPsec.Peers[i]
		for _, dir := range []string{"out", "in"} {
			if pr.OffloadFor(dir) != config.OffloadModeNone {
				out = append(out, PlannedSA{Dev: pr.OffloadDev, Inbound: dir == "in"})
			}
		}
	}
	return out
}
