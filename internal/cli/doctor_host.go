package cli

import (
	"fmt"

	"sluice/internal/config"
	"sluice/internal/diag"
)

// plannedSAs reads a host.yaml for doctor -f: the offloaded SAs it
// will add, per device, so sa-budget counts them with those installed.
// offload auto counts as offloaded (the worst case for the table).
func plannedSAs(path string) ([]diag.PlannedSA, error) {
	h, err := config.LoadHost(path)
	if err != nil {
		return nil, fmt.Errorf("-f: %w", err)
	}
	var out []diag.PlannedSA
	if h.IPsec == nil {
		return nil, nil
	}
	for i := range h.IPsec.Peers {
		pr := &h.IPsec.Peers[i]
		for _, dir := range []string{"out", "in"} {
			if pr.OffloadFor(dir) != config.OffloadModeNone {
				out = append(out, diag.PlannedSA{Dev: pr.OffloadDev, Inbound: dir == "in"})
			}
		}
	}
	return out, nil
}
