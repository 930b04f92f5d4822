// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"

	"github.com/safchain/ethtool"
)

// EthtoolStats is `ethtool -S IF`: the driver's counters (mlx5's
// ipsec_* among them). Devices without statistics give an empty map.
func EthtoolStats(ifname string) (map[string]uint64, error) {
	return withEthtool(func(e *ethtool.Ethtool) (map[string]uint64, error) {
		s, err := e.Stats(ifname)
		if err != nil {
			return nil, fmt.Errorf("ethtool -S %s: %w", ifname, err)
		}
		return s, nil
	})
}
