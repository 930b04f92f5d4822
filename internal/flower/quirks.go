// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"golang.org/x/sys/unix"

	"sluice/internal/driverquirk"
	"sluice/internal/fastpath"
	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// DeviceQuirks is what the flower tier must know of a packet-offload
// device's driver before it redirects cleartext into it (issue 31: never
// forward what the device will not encrypt). The gateway's XDP tier reads
// the same table (internal/gateway/quirks.go).
type DeviceQuirks struct {
	// ExactSelectors (driverquirk.ExactSelectorMatch): the device matches
	// a non-zero selector address as one address, so a rule for a subnet
	// selector would redirect the rest of the subnet into a device that
	// sends it in cleartext.
	ExactSelectors bool
	// NoTXMiss (driverquirk.NoTXMissRule): what an offloaded policy
	// selects while its SA is gone leaves the device in cleartext. A
	// hardware rule keeps redirecting into it from the SA's deletion until
	// the event withdraws the rule (measured: 1 frame at 100 packets/s on
	// the NIC model), and no flower action can check the SA per packet as
	// XDP does; so no outbound rule goes onto such a device.
	NoTXMiss bool
	// As names the driver and version the rows were read for.
	As string
}

// ReadDeviceQuirks reads the drivers of the device named dev (in the
// caller's network namespace) and of the devices beneath it (a VLAN's
// port, a bond's ports: kernel.StackDrivers), and the driver-quirks
// table's rows for them on the running kernel, the union where they
// differ. A driver that cannot be read is taken to have both quirks: its
// traffic stays with XDP and the kernel.
func ReadDeviceQuirks(dev string) DeviceQuirks {
	drivers, err := kernel.StackDrivers(dev)
	if err != nil {
		return DeviceQuirks{ExactSelectors: true, NoTXMiss: true, As: "an unreadable driver (" + err.Error() + ")"}
	}
	s := driverquirk.ForStack(drivers, kernelRelease(), "/")
	return DeviceQuirks{ExactSelectors: s.Has(driverquirk.ExactSelectorMatch), NoTXMiss: s.Has(driverquirk.NoTXMissRule), As: s.As}
}

func kernelRelease() string {
	var uts unix.Utsname
	if unix.Uname(&uts) != nil {
		return ""
	}
	return unix.ByteSliceToString(uts.Release[:])
}

// deviceWillEncrypt returns "" when the offload device encrypts every
// packet of p's selector that a rule would redirect into it, else the
// reason (shown in `show gateway`, with the fix).
func deviceWillEncrypt(p *xfrm.Policy, dev string, q DeviceQuirks) string {
	// mlx5's TX SA rule matches the reqid alone, and a template of reqid
	// 0 sets none (every mlx5 version read; fastpath's deviceMiss).
	if len(p.Tmpls) == 1 && p.Tmpls[0].Reqid == 0 {
		return "device: a template with reqid 0 selects no SA in " + dev + " (reqid0-cleartext), which would send the packets in cleartext; give the template a reqid"
	}
	if q.ExactSelectors && (subnet(p.Sel.Src.Addr().IsUnspecified(), p.Sel.Src.Bits(), p.Sel.Src.Addr().BitLen()) ||
		subnet(p.Sel.Dst.Addr().IsUnspecified(), p.Sel.Dst.Bits(), p.Sel.Dst.Addr().BitLen())) {
		return "device: " + dev + "'s driver (" + q.As + ") matches selector addresses exactly (exact-selector-match): " +
			"the rest of the subnet would leave it in cleartext, through the kernel too; use per-host /32 or /128 selectors, or a kernel with the subnet fix (6.15)"
	}
	if q.NoTXMiss {
		return "device: " + dev + "'s driver (" + q.As + ") sends in cleartext what a policy selects while its SA is gone (no-tx-miss-rule): " +
			"a hardware rule would redirect into it until the SA's deletion withdraws the rule; XDP serves it, checking the SA per packet"
	}
	return ""
}

// subnet says whether an exact-match driver narrows a selector address:
// a zero address sets no match (it matches all, as the kernel does), any
// other shorter than the full length is matched as one address.
func subnet(zero bool, bits, full int) bool {
	return !zero && bits < full
}

// accept takes out of q what the operator accepted (AcceptNoTXMiss),
// saying so in q.As; accepted: something was.
func (t *Tier) accept(q DeviceQuirks) (_ DeviceQuirks, accepted bool) {
	if q.NoTXMiss && t.AcceptNoTXMiss {
		q.NoTXMiss = false
		q.As += ", no-tx-miss-rule accepted (accept-leaks)"
		return q, true
	}
	return q, false
}

// deviceQuirks reads the driver quirks of every device that
// packet-offloads an OUT policy's SAs, on each apply (a module parameter
// or a driver can change under a running daemon), with what the gateway
// put in the snapshot (its configured overrides) added. It logs a
// device's quirks the first time they keep rules off it.
func (t *Tier) deviceQuirks(views []fastpath.PolicyView, gw map[int]fastpath.DeviceQuirks) map[int]DeviceQuirks {
	out := map[int]DeviceQuirks{}
	for i := range views {
		dev := views[i].OffloadIfindex
		if _, seen := out[dev]; seen || dev == 0 || views[i].Policy.Dir != xfrm.DirOut {
			continue
		}
		li, err := kernel.LinkByIndex(dev)
		if err != nil {
			out[dev] = DeviceQuirks{ExactSelectors: true, NoTXMiss: true, As: err.Error()}
			continue
		}
		q := ReadDeviceQuirks(li.Name)
		q.ExactSelectors = q.ExactSelectors || gw[dev].ExactSelectors
		q, accepted := t.accept(q)
		out[dev] = q
		if t.announced == nil {
			t.announced = map[string]DeviceQuirks{}
		}
		if old, ok := t.announced[li.Name]; (!ok || old != q) && accepted {
			t.Log.Warn("flower: accept-leaks names no-tx-miss-rule: outbound rules go onto this device, whose driver sends in cleartext what a rule redirects between an SA's deletion and the rule's withdrawal",
				"dev", li.Name, "as", q.As)
		} else if (!ok || old != q) && (q.ExactSelectors || q.NoTXMiss) {
			t.Log.Warn("flower: the device's driver would send some redirected packets in cleartext; those policies stay with XDP and the kernel (show gateway names each)",
				"dev", li.Name, "as", q.As, "exact_selector_match", q.ExactSelectors, "no_tx_miss_rule", q.NoTXMiss)
		}
		t.announced[li.Name] = q
	}
	return out
}
