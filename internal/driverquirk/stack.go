// SPDX-License-Identifier: Apache-2.0

package driverquirk

import (
	"slices"
	"strings"
)

// ForStack returns the rows of a stack of devices: an upper device (a
// VLAN, a macvlan, a bond) first, then the devices beneath it down to the
// ports that reach the wire (kernel.StackDrivers), each driver read as
// ForDevice reads it. The frames leave through the ports, so their rows
// are the device's: `ethtool -i` of a VLAN over a ConnectX says "802.1Q
// VLAN Support", which has no row, while mlx5's rows decide what leaks.
// When ports disagree (a bond over two drivers) the union is taken: any
// of them can carry the traffic, so the strictest reading wins.
func ForStack(drivers []string, kernelRelease, sysRoot string) Set {
	if len(drivers) == 0 {
		return For(AnyDriver, kernelRelease)
	}
	s := ForDevice(drivers[0], kernelRelease, sysRoot)
	if len(drivers) == 1 {
		return s
	}
	var as []string // the drivers with rows of their own, as read
	for i, d := range drivers {
		t := s
		if i > 0 {
			t = ForDevice(d, kernelRelease, sysRoot)
			s = s.Merge(t)
		}
		if t.hasDriverRows() && !slices.Contains(as, t.As) {
			as = append(as, t.As)
		}
	}
	if len(as) == 0 {
		as = append(as, drivers[len(drivers)-1]+" "+kernelRelease)
	}
	s.Driver = strings.Join(drivers, " over ")
	s.As = strings.Join(as, "; ")
	return s
}

// hasDriverRows: s has a row of a driver, not only the XFRM core's.
func (s Set) hasDriverRows() bool {
	for _, e := range s.entries {
		if e.Driver != AnyDriver {
			return true
		}
	}
	return false
}
