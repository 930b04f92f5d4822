// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"
	"net"
	"strings"
)

// IsIPsecCounter says whether an ethtool statistic counts IPsec offload
// work: its name mentions ipsec (mlx5's ipsec_rx_pkts, ixgbe's
// rx_ipsec...). The one rule show, verify and the agent share.
func IsIPsecCounter(name string) bool {
	return strings.Contains(strings.ToLower(name), "ipsec")
}

// EthtoolIPsecStats returns dev's IPsec counters (IsIPsecCounter); an
// empty map when the device has ethtool statistics but none for IPsec
// (netdevsim, software devices).
func EthtoolIPsecStats(dev string) (map[string]uint64, error) {
	all, err := EthtoolStats(dev)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for name, v := range all {
		if IsIPsecCounter(name) {
			out[name] = v
		}
	}
	return out, nil
}

// IPsecCounters returns, per interface, its IPsec counters
// (EthtoolIPsecStats): all interfaces, skipping those without ethtool
// statistics or without IPsec counters, or only the one named, whose
// error is returned.
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
		m, err := EthtoolIPsecStats(ifc.Name)
		if err != nil {
			if only != "" {
				return nil, fmt.Errorf("%s: %w", only, err)
			}
			continue
		}
		if len(m) > 0 {
			out[ifc.Name] = m
		}
	}
	return out, nil
}
