// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// ExplainFrame builds the frame for `sluice gateway explain` from --hex or from field/value pairs. A
// frame built from fields is sent to ingressMAC (the --iface device's MAC)
// unless dmac says otherwise: the program, like the kernel, forwards only
// frames sent to the interface.
func ExplainFrame(hexFrame string, args []string, ingressMAC net.HardwareAddr) ([]byte, error) {
	if hexFrame != "" {
		if len(args) > 0 {
			return nil, errors.New("give the packet either as fields or with --hex, not both")
		}
		b, err := hex.DecodeString(strings.NewReplacer(" ", "", ":", "").Replace(hexFrame))
		if err != nil {
			return nil, fmt.Errorf("--hex: %w", err)
		}
		if len(b) < 14 {
			return nil, fmt.Errorf("--hex: a frame of %d bytes is shorter than an Ethernet header (14 bytes); give the whole frame, from the destination MAC on", len(b))
		}
		return b, nil
	}
	p, err := ParsePacketFields(args)
	if err != nil {
		return nil, err
	}
	if p.DstMAC == nil && len(ingressMAC) == 6 {
		p.DstMAC = ingressMAC
	}
	return p.Marshal()
}

var protoByName = map[string]uint8{"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58, "sctp": 132, "udplite": 136, "esp": 50, "ah": 51, "gre": 47}

// ParsePacketFields builds a Packet from field/value pairs (src ADDR dst
// ADDR proto udp ...), the packet syntax of `sluice gateway explain`.
func ParsePacketFields(args []string) (Packet, error) {
	p := Packet{TTL: 64, Proto: 17, Payload: 18}
	if len(args)%2 != 0 {
		return p, fmt.Errorf("packet fields come in pairs (field value); %q has no value", args[len(args)-1])
	}
	num := func(field, v string, bits int) (uint64, error) {
		n, err := strconv.ParseUint(v, 0, bits)
		if err != nil {
			return 0, fmt.Errorf("%s: %q is not a number of %d bits", field, v, bits)
		}
		return n, nil
	}
	seen := map[string]bool{}
	for i := 0; i < len(args); i += 2 {
		f, v := args[i], args[i+1]
		key := f
		if f == "hoplimit" {
			key = "ttl" // one field, two names
		}
		if seen[key] {
			return p, fmt.Errorf("packet field %q given twice; give each field once", f)
		}
		seen[key] = true
		var err error
		var n uint64
		switch f {
		case "src", "dst":
			a, perr := netip.ParseAddr(v)
			if perr != nil {
				return p, fmt.Errorf("%s: %q is not an IP address", f, v)
			}
			if f == "src" {
				p.Src = a
			} else {
				p.Dst = a
			}
		case "proto":
			if pn, ok := protoByName[v]; ok {
				p.Proto = pn
			} else if n, err = num(f, v, 8); err == nil {
				p.Proto = uint8(n)
			}
		case "sport":
			n, err = num(f, v, 16)
			p.SPort = uint16(n)
		case "dport":
			n, err = num(f, v, 16)
			p.DPort = uint16(n)
		case "type":
			n, err = num(f, v, 8)
			p.ICMPType = uint8(n)
		case "code":
			n, err = num(f, v, 8)
			p.ICMPCode = uint8(n)
		case "ttl", "hoplimit":
			n, err = num(f, v, 8)
			p.TTL = uint8(n)
		case "vlan":
			n, err = num(f, v, 12)
			p.VLAN = uint16(n)
		case "len":
			n, err = num(f, v, 14)
			p.Payload = int(n)
		case "dmac", "smac":
			mac, merr := net.ParseMAC(v)
			if merr != nil {
				return p, fmt.Errorf("%s: %w", f, merr)
			}
			if f == "dmac" {
				p.DstMAC = mac
			} else {
				p.SrcMAC = mac
			}
		default:
			return p, fmt.Errorf("unknown packet field %q (fields: src dst proto sport dport type code ttl vlan len dmac smac)", f)
		}
		if err != nil {
			return p, err
		}
	}
	if !p.Src.IsValid() || !p.Dst.IsValid() {
		return p, errors.New("a packet needs at least src and dst")
	}
	return p, nil
}
