// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// OffloadProbe is what a device did with throwaway SAs.
type OffloadProbe struct {
	// Crypto and Packet are "" when the device accepted an outbound
	// tunnel-mode SA with that offload (and it was removed again), else
	// the kernel's refusal. Caps has every combination tried.
	Crypto string `json:"crypto"`
	Packet string `json:"packet"`
	// Caps holds, per "crypto|packet transport|tunnel out|in", "" when
	// the device accepted such an SA, else the refusal. Drivers differ:
	// ixgbe offloads transport mode only, ixgbevf inbound SAs only (its PF
	// refuses Tx requests, the ixgbevf VF-offload patches), netdevsim crypto only.
	Caps map[string]string `json:"caps,omitempty"`
	// Skipped, when set, says why the device was not probed at all.
	Skipped string `json:"skipped,omitempty"`
}

// ProbeCap names one combination of OffloadProbe.Caps.
func ProbeCap(offload, mode, dir string) string { return offload + " " + mode + " " + dir }

// ProbeOffload installs, then removes, ESP SAs bound to ifname, one per
// combination of offload (crypto, packet), mode (transport, tunnel) and
// direction (out, in). They carry documentation addresses (192.0.2.1 <->
// 198.51.100.1, RFC 5737) and a random SPI, and no policy refers to them,
// so no traffic can use them.
func ProbeOffload(ifname string) (OffloadProbe, error) {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return OffloadProbe{}, fmt.Errorf("interface %q: %w", ifname, err)
	}
	local, remote := netip.AddrFrom4([4]byte{192, 0, 2, 1}), netip.AddrFrom4([4]byte{198, 51, 100, 1})
	try := func(flags uint8, tunnel bool, inbound bool) string {
		var b [4]byte
		_, _ = rand.Read(b[:])
		spi := binary.BigEndian.Uint32(b[:])&0x0fffffff | 0x10000000
		st := ESPState{Src: local, Dst: remote, SPI: spi, Reqid: spi, Tunnel: tunnel,
			AEAD: "rfc4106(gcm(aes))", Key: make([]byte, 20), ICVBits: 128}
		if inbound {
			st.Src, st.Dst = remote, local
			flags |= OffloadInbound
		}
		st.Offload = &Offload{Ifindex: l.Attrs().Index, Flags: flags}
		if err := StateAddESP(st); err != nil {
			return err.Error()
		}
		// A driver that answers a crypto-offload request with EOPNOTSUPP
		// gets the SA kept in software and the add reported as a success
		// (xfrm_dev_state_add): only the installed SA tells.
		res := ""
		if !stateOffloaded(spi) {
			res = "declined by the device: the kernel installed the SA without offload"
		}
		if err := StateDelete(st.Dst, spi); err != nil {
			return "accepted, but removing it failed: " + err.Error()
		}
		return res
	}
	p := OffloadProbe{Caps: map[string]string{}}
	for _, o := range []struct {
		name  string
		flags uint8
	}{{"crypto", 0}, {"packet", OffloadPacket}} {
		for _, m := range []struct {
			name   string
			tunnel bool
		}{{"transport", false}, {"tunnel", true}} {
			for _, dir := range []string{"out", "in"} {
				p.Caps[ProbeCap(o.name, m.name, dir)] = try(o.flags, m.tunnel, dir == "in")
			}
		}
	}
	p.Crypto, p.Packet = p.Caps[ProbeCap("crypto", "tunnel", "out")], p.Caps[ProbeCap("packet", "tunnel", "out")]
	return p, nil
}

// stateOffloaded reports whether the SA with spi is installed with an
// offload device.
func stateOffloaded(spi uint32) bool {
	sas, err := DumpStates()
	if err != nil {
		return false
	}
	for _, sa := range sas {
		if sa.SPI == spi {
			return sa.Offload != nil
		}
	}
	return false
}
