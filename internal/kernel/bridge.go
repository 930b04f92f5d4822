// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// BridgeAdd creates a Linux bridge (`ip link add NAME type bridge`), with
// mtu when > 0. A guest network's bridge: the VTEP and the guests' ports
// are its ports.
func BridgeAdd(name string, mtu int) error {
	b := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}}
	if err := netlink.LinkAdd(b); err != nil {
		return fmt.Errorf("ip link add %s type bridge: %w", name, err)
	}
	return nil
}
