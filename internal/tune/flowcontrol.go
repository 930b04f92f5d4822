// SPDX-License-Identifier: Apache-2.0

package tune

import (
	"fmt"

	"sluice/internal/kernel"
)

// FlowControl is Ethernet flow control (802.3x pause frames), `ethtool -A
// IF rx off tx off` in the VM single-flow guide and the ConnectX-7 benchmark: a forwarding box must not pause
// its upstream when a queue fills; it drops and the loss shows in the
// benchmark instead of as hidden back-pressure.
type FlowControl struct {
	RX *bool
	TX *bool
}

// flowControlItem compares `ethtool -a` with the profile; a driver
// without pause support (veth, netdevsim) makes it not applicable.
func flowControlItem(name string, fc *FlowControl) (Item, error) {
	key := name + " flow-control"
	live, err := kernel.EthtoolPause(name)
	want := func(cur kernel.Pause) (rx, tx bool) {
		rx, tx = cur.RX, cur.TX
		if fc.RX != nil {
			rx = *fc.RX
		}
		if fc.TX != nil {
			tx = *fc.TX
		}
		return rx, tx
	}
	if err != nil {
		rx, tx := want(kernel.Pause{})
		return unsupported(key, pauseString(rx, tx), "ethtool -a", err)
	}
	rx, tx := want(live)
	return Item{Key: key, Want: pauseString(rx, tx), Live: pauseString(live.RX, live.TX),
		Command: fmt.Sprintf("ethtool -A %s rx %s tx %s", name, onoff(rx), onoff(tx)),
		apply:   func() error { return kernel.EthtoolSetPause(name, rx, tx) }}, nil
}

func pauseString(rx, tx bool) string { return "rx " + onoff(rx) + " tx " + onoff(tx) }

// sysrootSkipped reports the live-device settings a --sysroot run cannot
// check, so nothing is skipped silently: ethtool and setpci read the
// running kernel's devices and the PCI config space, which a captured
// tree of /sys and /proc does not hold.
func sysrootSkipped(name string, ifc *Interface) []Item {
	var items []Item
	if ifc.RxQueues > 0 || ifc.RSSEqual > 0 || len(ifc.Features) > 0 || ifc.Rings != nil || ifc.Coalesce != nil ||
		len(ifc.PrivateFlags) > 0 || ifc.FlowControl != nil {
		items = append(items, notApplicable(name+" ethtool settings", "(profile)",
			"skipped under --sysroot: ethtool asks the running kernel's device, which a captured tree does not hold"))
	}
	if ifc.PCIeMaxReadReq > 0 {
		items = append(items, notApplicable(name+" pcie max-read-req", itoa(ifc.PCIeMaxReadReq),
			"skipped under --sysroot: setpci reads the live PCI config space (Device Control, CAP_EXP+8), which a captured tree does not hold"))
	}
	return items
}
