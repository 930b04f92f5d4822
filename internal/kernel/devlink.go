// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"errors"
	"fmt"
	"sort"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
)

// devlink through vishvananda/netlink's devlink support (eswitch mode,
// device parameters): it is already sluice's netlink library, is used by
// the SR-IOV network operator for exactly these calls, and speaks the
// generic netlink family directly, so no devlink binary is needed. The one
// thing it lacks, port function capabilities (mlx5's ipsec_crypto and
// ipsec_packet, Linux 6.6+), is encoded in devlink_port.go.

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

// DevlinkEswitchMode is `devlink dev eswitch show BUS/DEV`.
func DevlinkEswitchMode(bus, dev string) (string, error) {
	d, err := netlink.DevLinkGetDeviceByName(bus, dev)
	if err != nil {
		return "", fmt.Errorf("devlink dev eswitch show %s/%s: %w", bus, dev, err)
	}
	return d.Attrs.Eswitch.Mode, nil
}

// DevlinkParam reads the runtime value of a device parameter (`devlink
// dev param show BUS/DEV name NAME`); found is false when the device has no
// such parameter.
func DevlinkParam(bus, dev, name string) (value string, found bool, err error) {
	p, err := netlink.DevlinkGetDeviceParamByName(bus, dev, name)
	if err != nil {
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EOPNOTSUPP) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("devlink dev param show %s/%s name %s: %w", bus, dev, name, err)
	}
	for _, v := range p.Values {
		if v.CMODE == nl.DEVLINK_PARAM_CMODE_RUNTIME {
			return fmt.Sprint(v.Data), true, nil
		}
	}
	return "", true, nil
}

// DevlinkSetParam sets a string parameter's runtime value (`devlink dev
// param set BUS/DEV name NAME value V cmode runtime`).
func DevlinkSetParam(bus, dev, name, value string) error {
	if err := netlink.DevlinkSetDeviceParam(bus, dev, name, nl.DEVLINK_PARAM_CMODE_RUNTIME, value); err != nil {
		return fmt.Errorf("devlink dev param set %s/%s name %s value %s cmode runtime: %w", bus, dev, name, value, err)
	}
	return nil
}
