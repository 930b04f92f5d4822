// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"strconv"
	"strings"
)

// BondOffloadBroken reports kernels where ESP offload through a bond is
// known to be broken: from 6.11 (bonding sets xso.real_dev only after the
// slave's xdo_dev_state_add succeeded, so the slave driver is handed the
// bond's netdev: netdevsim and mlx5 then treat the bond's private data as
// their own) until the drivers were given the device explicitly. Verified
// in sluice's test VM on 6.12.95: the SA is accepted, no port holds it,
// and the next failover oopses in nsim_ipsec_del_sa.
func BondOffloadBroken(release string) bool {
	maj, min, ok := majorMinor(release)
	if !ok {
		return false
	}
	v := maj*1000 + min
	return v >= 6011 && v < 6016
}

func majorMinor(release string) (int, int, bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	maj, err1 := strconv.Atoi(parts[0])
	minStr := parts[1]
	for i, c := range minStr {
		if c < '0' || c > '9' {
			minStr = minStr[:i]
			break
		}
	}
	min, err2 := strconv.Atoi(minStr)
	return maj, min, err1 == nil && err2 == nil
}
