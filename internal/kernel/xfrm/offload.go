// SPDX-License-Identifier: Apache-2.0

package xfrm

import "fmt"

// offloadKnownFlags are the flags the kernel accepts on input.
const offloadKnownFlags = OffloadIPv6 | OffloadInbound | OffloadPacket

// MarshalAttr encodes o as the payload of an XFRMA_OFFLOAD_DEV attribute,
// byte for byte what iproute2 sends for `offload [packet] dev DEV dir in|out`.
//
// iproute2 never sets OffloadIPv6 and the kernel ignores it (it takes the
// family from the SA): leave it clear.
func (o Offload) MarshalAttr() []byte {
	b := make([]byte, xfrmOffloadLen)
	ne.PutUint32(b[offloadIfindex:], uint32(int32(o.Ifindex)))
	b[offloadFlags] = o.Flags
	return b
}

// validate rejects what the kernel would reject, before a round trip, so
// the error can name the field.
func (o Offload) validate() error {
	if o.Ifindex <= 0 {
		return fmt.Errorf("offload: ifindex %d: no offloading device (the ifindex must be > 0)", o.Ifindex)
	}
	if o.Flags&^offloadKnownFlags != 0 {
		return fmt.Errorf("offload: unknown flags %#x (known: ipv6=1, inbound=2, packet=4)", o.Flags&^offloadKnownFlags)
	}
	return nil
}

// ParseOffload decodes an XFRMA_OFFLOAD_DEV payload as the kernel reports
// it for an SA or policy bound to a device. Longer payloads are accepted
// (a future kernel may grow the struct); flags the kernel may add later are
// kept, so callers test the bits they know (Packet, Inbound).
func ParseOffload(b []byte) (*Offload, error) {
	if len(b) < xfrmOffloadLen {
		return nil, fmt.Errorf("XFRMA_OFFLOAD_DEV: %d bytes, want %d", len(b), xfrmOffloadLen)
	}
	o := &Offload{Ifindex: int(int32(ne.Uint32(b[offloadIfindex:]))), Flags: b[offloadFlags]}
	if o.Ifindex <= 0 {
		return nil, fmt.Errorf("XFRMA_OFFLOAD_DEV: ifindex %d", o.Ifindex)
	}
	return o, nil
}
