// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"
	"sort"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
)

// DevlinkFacts is what devlink says about one device: its eswitch mode
// and the runtime value of its parameters (`devlink dev param show`).
type DevlinkFacts struct {
	Bus     string            `json:"bus"`
	Device  string            `json:"device"`
	Driver  string            `json:"driver,omitempty"`
	Eswitch string            `json:"eswitch,omitempty"`
	Params  map[string]string `json:"params,omitempty"`
}

// DevlinkDevices lists devlink devices with their eswitch mode and
// parameters. No devlink (module not loaded, no device) is an empty list.
func DevlinkDevices() ([]DevlinkFacts, error) {
	devs, err := netlink.DevLinkGetDeviceList()
	if err != nil {
		return nil, nil //nolint:nilerr // no devlink family: nothing to report
	}
	var out []DevlinkFacts
	for _, d := range devs {
		f := DevlinkFacts{Bus: d.BusName, Device: d.DeviceName, Eswitch: d.Attrs.Eswitch.Mode, Params: map[string]string{}}
		if info, err := netlink.DevlinkGetDeviceInfoByNameAsMap(d.BusName, d.DeviceName); err == nil {
			f.Driver = info["driver"]
		}
		params, err := netlink.DevlinkGetDeviceParams(d.BusName, d.DeviceName)
		if err == nil {
			for _, p := range params {
				for _, v := range p.Values {
					if v.CMODE == nl.DEVLINK_PARAM_CMODE_RUNTIME || len(p.Values) == 1 {
						f.Params[p.Name] = fmt.Sprint(v.Data)
					}
				}
			}
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Bus+out[i].Device < out[j].Bus+out[j].Device })
	return out, nil
}

// DevlinkSetEswitch sets a device's eswitch mode ("legacy", "switchdev").
func DevlinkSetEswitch(bus, device, mode string) error {
	d, err := netlink.DevLinkGetDeviceByName(bus, device)
	if err != nil {
		return fmt.Errorf("devlink dev %s/%s: %w", bus, device, err)
	}
	if err := netlink.DevLinkSetEswitchMode(d, mode); err != nil {
		return fmt.Errorf("devlink dev eswitch set %s/%s mode %s: %w", bus, device, mode, err)
	}
	return nil
}
