// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"log/slog"

	"golang.org/x/sys/unix"

	"sluice/internal/driverquirk"
	"sluice/internal/fastpath"
	"sluice/internal/kernel"
)

// deviceQuirks says, by ifindex, how each gateway interface's driver
// departs from the kernel's XFRM, as far as the fast path's promise goes
// (fastpath.DeviceQuirks; docs/fastpath.md, "What the device would send
// in cleartext"): from the driver-quirks table for the interface's driver
// on the running kernel, or from override (by name), which wins. A driver
// that cannot be read is taken to match selectors exactly: its subnet
// policies go to the kernel rather than risk cleartext.
func deviceQuirks(ifaces []Iface, override map[string]fastpath.DeviceQuirks, log *slog.Logger) (map[int]fastpath.DeviceQuirks, error) {
	release := kernelRelease()
	out := map[int]fastpath.DeviceQuirks{}
	for _, gi := range ifaces {
		li, err := link(gi.Name)
		if err != nil {
			return nil, err
		}
		q, ok := override[gi.Name]
		if !ok {
			driver, _, err := kernel.EthtoolDriver(gi.Name)
			if err != nil {
				log.Warn("cannot read the interface's driver: its subnet policies go to the kernel, as on a driver that matches selector addresses exactly", "iface", gi.Name, "err", err)
				q = fastpath.DeviceQuirks{ExactSelectors: true}
			} else {
				set := driverquirk.ForDevice(driver, release, "/")
				q = fastpath.DeviceQuirks{ExactSelectors: set.Has(driverquirk.ExactSelectorMatch)}
				if q.ExactSelectors {
					log.Info("the driver matches selector addresses exactly: packets of subnet policies offloaded here go to the kernel (device-miss)", "iface", gi.Name, "driver", driver, "kernel", release, "as", set.As)
				}
			}
		}
		if q != (fastpath.DeviceQuirks{}) {
			out[li.Ifindex] = q
		}
	}
	return out, nil
}

func kernelRelease() string {
	var uts unix.Utsname
	if unix.Uname(&uts) != nil {
		return ""
	}
	return unix.ByteSliceToString(uts.Release[:])
}

// leakOnSAMiss names the first gateway interface whose driver sends in
// cleartext what an offloaded policy selects but no SA serves
// (driverquirk.NoTXMissRule: mlx5, whose TX SA table misses onto
// the wire in both eswitch modes). A frame XDP
// redirects there in the moment between the kernel deleting an SA and
// the mirror hearing of it leaves unencrypted, so such a gateway takes
// the strict SA check (the kernel asked on every forward): the frames
// the mirror check would still send are the leak issue 31 counted.
// A driver that cannot be read is taken to have the quirk, as
// deviceQuirks takes it to match exactly: the fast path fails closed.
func leakOnSAMiss(ifaces []Iface) (iface, driver string) {
	release := kernelRelease()
	for _, gi := range ifaces {
		d, _, err := kernel.EthtoolDriver(gi.Name)
		if err != nil {
			return gi.Name, "unknown (" + err.Error() + ")"
		}
		if driverquirk.ForDevice(d, release, "/").Has(driverquirk.NoTXMissRule) {
			return gi.Name, d
		}
	}
	return "", ""
}
