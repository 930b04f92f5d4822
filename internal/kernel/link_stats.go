// SPDX-License-Identifier: Apache-2.0

package kernel

import "github.com/vishvananda/netlink"

// LinkTxPackets is the device's transmitted packet count (IFLA_STATS64),
// whatever the driver calls it in ethtool -S: verify's subnet probe uses
// it to tell "the device sent the probe in cleartext" from "the probe
// never reached the device".
func LinkTxPackets(name string) (uint64, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return 0, err
	}
	if s := l.Attrs().Statistics; s != nil {
		return s.TxPackets, nil
	}
	return 0, nil
}
