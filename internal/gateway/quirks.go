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
// in cleartext"): from the driver-quirks table for the drivers of the
// interface and of every device beneath it (a VLAN's port, a bond's
// ports: kernel.StackDevices) on the running kernel, or from override
// (by name), which wins. The quirks go to the interface and to each
// device beneath it: the kernel offloads policies to the port, not to
// the VLAN on it, and the fast path looks them up by the policy's
// offload device. A driver that cannot be read is taken to match
// selectors exactly: its subnet policies go to the kernel rather than
// risk cleartext.
func deviceQuirks(ifaces []Iface, override map[string]fastpath.DeviceQuirks, log *slog.Logger) (map[int]fastpath.DeviceQuirks, error) {
	release := kernelRelease()
	out := map[int]fastpath.DeviceQuirks{}
	for _, gi := range ifaces {
		li, err := link(gi.Name)
		if err != nil {
			return nil, err
		}
		devs, err := kernel.StackDevices(gi.Name)
		q, ok := override[gi.Name]
		if !ok {
			if err != nil {
				log.Warn("cannot read the interface's driver, or a driver beneath it: its subnet policies go to the kernel, as on a driver that matches selector addresses exactly", "iface", gi.Name, "err", err)
				q = fastpath.DeviceQuirks{ExactSelectors: true}
			} else {
				set := driverquirk.ForStack(stackDrivers(devs), release, "/")
				q = fastpath.DeviceQuirks{ExactSelectors: set.Has(driverquirk.ExactSelectorMatch)}
				if q.ExactSelectors {
					log.Info("the driver matches selector addresses exactly: packets of subnet policies offloaded here go to the kernel (device-miss)", "iface", gi.Name, "driver", set.Driver, "kernel", release, "as", set.As)
				}
			}
		}
		if q == (fastpath.DeviceQuirks{}) {
			continue
		}
		out[li.Ifindex] = merge(out[li.Ifindex], q)
		for _, d := range devs {
			out[d.Ifindex] = merge(out[d.Ifindex], q)
		}
	}
	return out, nil
}

// merge: a port beneath two gateway interfaces (two VLANs) takes both's
// quirks.
func merge(a, b fastpath.DeviceQuirks) fastpath.DeviceQuirks {
	return fastpath.DeviceQuirks{ExactSelectors: a.ExactSelectors || b.ExactSelectors}
}

func stackDrivers(devs []kernel.StackDevice) []string {
	out := make([]string, 0, len(devs))
	for _, d := range devs {
		out = append(out, d.Driver)
	}
	return out
}

func kernelRelease() string {
	var uts unix.Utsname
	if unix.Uname(&uts) != nil {
		return ""
	}
	return unix.ByteSliceToString(uts.Release[:])
}

// leakOnSAMiss names the first gateway interface whose driver, or a
// driver beneath it (a VLAN's port, a bond's ports), sends in cleartext
// what an offloaded policy selects but no SA serves
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
		drivers, err := kernel.StackDrivers(gi.Name)
		if err != nil {
			return gi.Name, "unknown (" + err.Error() + ")"
		}
		if s := driverquirk.ForStack(drivers, release, "/"); s.Has(driverquirk.NoTXMissRule) {
			return gi.Name, s.Driver
		}
	}
	return "", ""
}
