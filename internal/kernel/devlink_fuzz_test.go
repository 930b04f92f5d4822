// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"reflect"
	"testing"

	"github.com/vishvananda/netlink/nl"
)

// devlinkPortMsg encodes p as the kernel answers DEVLINK_CMD_PORT_GET.
func devlinkPortMsg(p devlinkPort) []byte {
	b := (&nl.Genlmsg{Command: nl.DEVLINK_CMD_PORT_NEW, Version: nl.GENL_DEVLINK_VERSION}).Serialize()
	add := func(a *nl.RtAttr) { b = append(b, a.Serialize()...) }
	add(nl.NewRtAttr(nl.DEVLINK_ATTR_BUS_NAME, nl.ZeroTerminated(p.bus)))
	add(nl.NewRtAttr(nl.DEVLINK_ATTR_DEV_NAME, nl.ZeroTerminated(p.dev)))
	add(nl.NewRtAttr(nl.DEVLINK_ATTR_PORT_INDEX, nl.Uint32Attr(p.Index)))
	if p.flavour >= 0 {
		add(nl.NewRtAttr(nl.DEVLINK_ATTR_PORT_FLAVOUR, nl.Uint16Attr(uint16(p.flavour))))
	}
	if p.vf >= 0 {
		add(nl.NewRtAttr(devlinkAttrPortPCIVFNumber, nl.Uint16Attr(uint16(p.vf))))
	}
	if p.CapsKnown {
		fn := nl.NewRtAttr(nl.DEVLINK_ATTR_PORT_FUNCTION, nil) // nla_nest_start_noflag in 6.12
		fn.AddRtAttr(devlinkPortFnAttrCaps, append(nl.Uint32Attr(p.Caps), nl.Uint32Attr(^uint32(0))...))
		add(fn)
	}
	return b
}

// FuzzParseDevlinkPort checks the devlink port decoder: no panic on short
// attributes (the panics this target found are fixed in parseDevlinkPort),
// names without their NUL, and what it decodes re-encodes to the same port.
//
//	go test -run '^$' -fuzz '^FuzzParseDevlinkPort$' -fuzztime 30s ./internal/kernel/
func FuzzParseDevlinkPort(f *testing.F) {
	f.Add(devlinkPortMsg(devlinkPort{VFPort: VFPort{Index: 65537, Caps: 3, CapsKnown: true}, bus: "pci", dev: "0000:03:00.0", flavour: devlinkPortFlavourPCIVF, vf: 1}))
	f.Add(devlinkPortMsg(devlinkPort{VFPort: VFPort{Index: 1}, bus: "netdevsim", dev: "netdevsim10", flavour: 0, vf: -1}))
	f.Add([]byte{1, 1, 0, 0, 5, 0, 0x4e, 0})
	f.Fuzz(func(t *testing.T, m []byte) {
		p, err := parseDevlinkPort(m)
		if err != nil {
			return
		}
		if len(p.bus) > 0 && p.bus[len(p.bus)-1] == 0 || len(p.dev) > 0 && p.dev[len(p.dev)-1] == 0 {
			t.Fatalf("names %q %q keep their NUL", p.bus, p.dev)
		}
		if p.flavour > 0xffff || p.vf > 0xffff {
			t.Fatalf("port %+v", p)
		}
		// Round trip what survives encoding: names are C strings (cut at
		// the first NUL), a flavour/VF of 0xffff... are real values.
		if containsNUL(p.bus) || containsNUL(p.dev) {
			return
		}
		back, err := parseDevlinkPort(devlinkPortMsg(p))
		if err != nil || !reflect.DeepEqual(back, p) {
			t.Fatalf("round trip:\n got %+v, %v\nwant %+v", back, err, p)
		}
	})
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}
