// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// A device's driver says little when the device is stacked on another:
// `ethtool -i` of a VLAN says "802.1Q VLAN Support", of a bond "bonding",
// while the frames leave through the port beneath, whose driver decides
// what is encrypted (issue 31). StackDevices walks down to those ports.

// ErrLowerElsewhere: a device of the stack sits on a device in another
// network namespace (a macvlan moved into a container, say), whose driver
// cannot be read from this one.
var ErrLowerElsewhere = errors.New("the device beneath is in another network namespace")

// stackedOnLink are the kinds whose frames leave through the one device
// IFLA_LINK names (netdev_upper_dev_link's lower device). Other kinds
// with IFLA_LINK are not stacked: a veth's is its peer, a tunnel's the
// device its outer packets were bound to, a VXLAN's none (its VTEP
// device is a routing hint).
var stackedOnLink = map[string]bool{
	"vlan": true, "macvlan": true, "macvtap": true, "ipvlan": true, "ipvtap": true, "macsec": true,
}

// stackedOnPorts are the kinds whose frames leave through their ports
// (IFLA_MASTER of each port): any of them, after a failover or by hash.
var stackedOnPorts = map[string]bool{"bond": true, "team": true}

// StackedOnLink says whether a device of kind (rtnetlink's link kind)
// sends its frames through the device its IFLA_LINK names.
func StackedOnLink(kind string) bool { return stackedOnLink[kind] }

// StackedOnPorts says whether a device of kind sends its frames through
// its ports (the devices whose master it is).
func StackedOnPorts(kind string) bool { return stackedOnPorts[kind] }

// StackDevice is one device of a stack and its driver (`ethtool -i`).
type StackDevice struct {
	Name    string
	Ifindex int
	Kind    string
	Driver  string
}

// maxStackDepth bounds the walk: the kernel itself refuses nesting deeper
// than MAX_NEST_DEV (8).
const maxStackDepth = 8

// StackDevices returns the device named name and every device beneath it
// (a VLAN's or macvlan's lower device, a bond's or team's ports, down
// to the ports that reach the wire), name first, in the calling thread's
// network namespace. Each is read with its driver. The error names the
// device whose driver cannot be read, or ErrLowerElsewhere: a caller that
// decides what may leak must then assume the worst.
func StackDevices(name string) ([]StackDevice, error) {
	// The top device's driver first: its error is `ethtool -i`'s own,
	// as callers that read one device reported it.
	if _, _, err := EthtoolDriver(name); err != nil {
		return nil, err
	}
	top, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w", name, err)
	}
	var all []netlink.Link // listed once, for the ports of a bond or team
	var out []StackDevice
	seen := map[int]bool{}
	var walk func(l netlink.Link, depth int) error
	walk = func(l netlink.Link, depth int) error {
		a := l.Attrs()
		if seen[a.Index] || depth > maxStackDepth {
			return nil
		}
		seen[a.Index] = true
		drv, _, err := EthtoolDriver(a.Name)
		if err != nil {
			return fmt.Errorf("beneath %s: %w", name, err)
		}
		out = append(out, StackDevice{Name: a.Name, Ifindex: a.Index, Kind: l.Type(), Driver: drv})
		switch {
		case StackedOnLink(l.Type()) && a.ParentIndex != 0:
			if a.NetNsID >= 0 {
				return fmt.Errorf("%s sits on ifindex %d of network namespace id %d: %w", a.Name, a.ParentIndex, a.NetNsID, ErrLowerElsewhere)
			}
			lower, err := netlink.LinkByIndex(a.ParentIndex)
			if err != nil {
				return fmt.Errorf("%s's lower device (ifindex %d): %w", a.Name, a.ParentIndex, err)
			}
			return walk(lower, depth+1)
		case StackedOnPorts(l.Type()):
			if all == nil {
				if all, err = netlink.LinkList(); err != nil {
					return fmt.Errorf("listing the ports of %s: %w", a.Name, err)
				}
			}
			for _, p := range all {
				if p.Attrs().MasterIndex == a.Index {
					if err := walk(p, depth+1); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	return out, walk(top, 0)
}

// StackDrivers returns the drivers of StackDevices(name), top first.
func StackDrivers(name string) ([]string, error) {
	devs, err := StackDevices(name)
	drivers := make([]string, 0, len(devs))
	for _, d := range devs {
		drivers = append(drivers, d.Driver)
	}
	return drivers, err
}
