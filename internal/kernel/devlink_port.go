// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Devlink ports of VFs and their function capabilities (mlx5's
// ipsec_crypto and ipsec_packet, Linux 6.6+): vishvananda/netlink lacks
// them, so they are encoded here with its request helpers.

// Devlink port function capability bits (enum devlink_port_fn_attr_cap).
const (
	PortFnCapIPsecCrypto uint32 = 1 << 2
	PortFnCapIPsecPacket uint32 = 1 << 3
)

const (
	devlinkAttrPortPCIVFNumber = 128 // DEVLINK_ATTR_PORT_PCI_VF_NUMBER
	devlinkPortFnAttrCaps      = 4   // DEVLINK_PORT_FN_ATTR_CAPS
	devlinkPortFlavourPCIVF    = 4   // DEVLINK_PORT_FLAVOUR_PCI_VF
)

// VFPort is a VF's eswitch port: its devlink index and function caps.
type VFPort struct {
	Index uint32
	// Caps holds the capability bits; CapsKnown is false when the driver
	// reports none (it does not support port function caps).
	Caps      uint32
	CapsKnown bool
}

// DevlinkVFPort finds VF vf's eswitch port of device BUS/DEV (switchdev
// mode creates them) and reads its function capabilities (`devlink port
// show BUS/DEV/N`).
func DevlinkVFPort(bus, dev string, vf int) (*VFPort, error) {
	fam, err := netlink.GenlFamilyGet(nl.GENL_DEVLINK_NAME)
	if err != nil {
		return nil, fmt.Errorf("devlink: %w", err)
	}
	req := nl.NewNetlinkRequest(int(fam.ID), unix.NLM_F_DUMP)
	req.AddData(&nl.Genlmsg{Command: nl.DEVLINK_CMD_PORT_GET, Version: nl.GENL_DEVLINK_VERSION})
	req.AddData(nl.NewRtAttr(nl.DEVLINK_ATTR_BUS_NAME, nl.ZeroTerminated(bus)))
	req.AddData(nl.NewRtAttr(nl.DEVLINK_ATTR_DEV_NAME, nl.ZeroTerminated(dev)))
	msgs, err := req.Execute(unix.NETLINK_GENERIC, 0)
	if err != nil {
		return nil, fmt.Errorf("devlink port show %s/%s: %w", bus, dev, err)
	}
	for _, m := range msgs {
		port, err := parseDevlinkPort(m)
		if err != nil {
			return nil, err
		}
		if port.bus == bus && port.dev == dev && port.flavour == devlinkPortFlavourPCIVF && port.vf == vf {
			return &port.VFPort, nil
		}
	}
	return nil, &NoVFPortError{Bus: bus, Dev: dev, VF: vf}
}

// NoVFPortError: device BUS/DEV lists no eswitch port for the VF.
type NoVFPortError struct {
	Bus, Dev string
	VF       int
}

func (e *NoVFPortError) Error() string {
	return fmt.Sprintf("devlink %s/%s has no eswitch port for VF %d", e.Bus, e.Dev, e.VF)
}

// DevlinkSetVFPortCaps sets the capability bits in mask to value on a
// port (`devlink port function set BUS/DEV/N ipsec_crypto enable ...`,
// iproute2 6.6+). The VF must not be bound to a driver while it changes.
func DevlinkSetVFPortCaps(bus, dev string, port, value, mask uint32) error {
	fam, err := netlink.GenlFamilyGet(nl.GENL_DEVLINK_NAME)
	if err != nil {
		return fmt.Errorf("devlink: %w", err)
	}
	req := nl.NewNetlinkRequest(int(fam.ID), unix.NLM_F_ACK)
	req.AddData(&nl.Genlmsg{Command: nl.DEVLINK_CMD_PORT_SET, Version: nl.GENL_DEVLINK_VERSION})
	req.AddData(nl.NewRtAttr(nl.DEVLINK_ATTR_BUS_NAME, nl.ZeroTerminated(bus)))
	req.AddData(nl.NewRtAttr(nl.DEVLINK_ATTR_DEV_NAME, nl.ZeroTerminated(dev)))
	req.AddData(nl.NewRtAttr(nl.DEVLINK_ATTR_PORT_INDEX, nl.Uint32Attr(port)))
	fn := nl.NewRtAttr(nl.DEVLINK_ATTR_PORT_FUNCTION|unix.NLA_F_NESTED, nil)
	fn.AddRtAttr(devlinkPortFnAttrCaps, append(nl.Uint32Attr(value), nl.Uint32Attr(mask)...))
	req.AddData(fn)
	if _, err := req.Execute(unix.NETLINK_GENERIC, 0); err != nil {
		return fmt.Errorf("devlink port function set %s/%s/%d caps: %w", bus, dev, port, err)
	}
	return nil
}

// devlinkPort is one DEVLINK_CMD_PORT_GET reply.
type devlinkPort struct {
	VFPort
	bus, dev string
	flavour  int // -1: not reported
	vf       int // the PCI VF number; -1: not a VF port
}

// parseDevlinkPort decodes one devlink port message (genl header and
// attributes). Attributes shorter than their type are an error, not a
// panic: the bytes come from the kernel, but a driver bug must not take
// the daemon down.
func parseDevlinkPort(m []byte) (devlinkPort, error) {
	p := devlinkPort{flavour: -1, vf: -1}
	if len(m) < nl.SizeofGenlmsg {
		return p, fmt.Errorf("devlink port: message of %d bytes", len(m))
	}
	attrs, err := attrList(m[nl.SizeofGenlmsg:])
	if err != nil {
		return p, err
	}
	short := func(a syscall.NetlinkRouteAttr, n int) error {
		if len(a.Value) < n {
			return fmt.Errorf("devlink port: attribute %d has %d bytes, want %d", a.Attr.Type, len(a.Value), n)
		}
		return nil
	}
	for _, a := range attrs {
		switch a.Attr.Type & nlaTypeMask { // the kernel may flag nests (NLA_F_NESTED)
		case nl.DEVLINK_ATTR_BUS_NAME:
			p.bus = string(trimZero(a.Value))
		case nl.DEVLINK_ATTR_DEV_NAME:
			p.dev = string(trimZero(a.Value))
		case nl.DEVLINK_ATTR_PORT_INDEX:
			if err := short(a, 4); err != nil {
				return p, err
			}
			p.Index = ne.Uint32(a.Value)
		case nl.DEVLINK_ATTR_PORT_FLAVOUR:
			if err := short(a, 2); err != nil {
				return p, err
			}
			p.flavour = int(ne.Uint16(a.Value))
		case devlinkAttrPortPCIVFNumber:
			if err := short(a, 2); err != nil {
				return p, err
			}
			p.vf = int(ne.Uint16(a.Value))
		case nl.DEVLINK_ATTR_PORT_FUNCTION:
			fn, err := attrList(a.Value)
			if err != nil {
				return p, err
			}
			for _, f := range fn {
				if f.Attr.Type&nlaTypeMask == devlinkPortFnAttrCaps && len(f.Value) >= 8 {
					p.Caps, p.CapsKnown = ne.Uint32(f.Value), true
				}
			}
		}
	}
	return p, nil
}

// attrList splits netlink attributes like nl.ParseRouteAttr, which panics
// (slice bounds) when the last attribute's length is not a multiple of 4
// and no padding follows it (found by FuzzParseDevlinkPort).
func attrList(b []byte) ([]syscall.NetlinkRouteAttr, error) {
	var attrs []syscall.NetlinkRouteAttr
	for len(b) >= unix.SizeofRtAttr {
		l := int(ne.Uint16(b))
		if l < unix.SizeofRtAttr || l > len(b) {
			return nil, fmt.Errorf("netlink attribute of length %d with %d bytes left", l, len(b))
		}
		attrs = append(attrs, syscall.NetlinkRouteAttr{
			Attr:  syscall.RtAttr{Len: uint16(l), Type: ne.Uint16(b[2:])},
			Value: b[unix.SizeofRtAttr:l],
		})
		b = b[min((l+3)&^3, len(b)):]
	}
	return attrs, nil
}

func trimZero(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

// Netlink carries host-order integers in native byte order.
var ne = binary.NativeEndian

// nlaTypeMask strips NLA_F_NESTED and NLA_F_NET_BYTEORDER from a type.
const nlaTypeMask = 0x3fff
