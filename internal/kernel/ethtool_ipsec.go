// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"
	"net"
	"strings"
)

// IPsecCounters returns, per interface, the ethtool counters whose name
// mentions ipsec (mlx5's ipsec_rx_pkts, ixgbe's rx_ipsec...): all
// interfaces, skipping those without ethtool statistics, or only the one
// named, whose error is returned.
func IPsecCounters(only string) (map[string]map[string]uint64, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]uint64{}
	for _, ifc := range ifs {
		if only != "" && ifc.Name != only {
			continue
		}
		all, err := EthtoolStats(ifc.Name)
		if err != nil {
			if only != "" {
				return nil, fmt.Errorf("%s: %w", only, err)
			}
			continue
		}
		for name, v := range all {
			if strings.Contains(strings.ToLower(name), "ipsec") {
				if out[ifc.Name] == nil {
					out[ifc.Name] = map[string]uint64{}
				}
				out[ifc.Name][name] = v
			}
		}
	}
	return out, nil
}
