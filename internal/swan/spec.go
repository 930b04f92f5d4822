// SPDX-License-Identifier: Apache-2.0

// Package swan generates strongSwan (swanctl.conf) configurations for the
// tunnel layouts of the BlueField-3 benchmark (topologies "test0" and "routed", gateway roles
// gw0 and gw1), the matching routing plan, and drives a running charon over
// VICI (load, initiate, terminate, unload, list) with github.com/strongswan/govici.
//
// The addressing is exactly the operators' bash generators', quirks included,
// so that a gateway configured by sluice talks to one configured by the BlueField-3 benchmark's
// scripts: tunnel i (1-based) has
//
//	carrier (peer) address   123.0.(i/255).(i%255+1)        test0
//	                         123.(2+p).(i/255+1).(i%255+1)  routed, port p
//	remote/local_ts          48.((i-1)/255).((i-1)%255).0/24 (49.x for routed port 1)
//	the other side's ts      16.0.0.0/8 (17.0.0.0/8 for routed port 1)
package swan

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"unicode"
)

// Topologies and roles of the BlueField-3 benchmark.
const (
	TopologyTest0  = "test0"  // one tunnel port; carriers 123.0.0.0/16
	TopologyRouted = "routed" // two tunnel ports behind a router; carriers 123.0-3.0.0/16

	RoleGW0 = "gw0" // the concentrator: one address per port, initiates every tunnel
	RoleGW1 = "gw1" // the far side: one carrier address per tunnel
)

// Hardware offload values accepted by --hw-offload, and what swanctl.conf
// calls them (strongSwan spells crypto offload "yes").
var hwOffloadConf = map[string]string{"no": "no", "crypto": "yes", "packet": "packet", "auto": "auto"}

// Limits of the BlueField-3 benchmark's addressing.
const (
	// MaxTunnelsTest0 is 255 x 255: remote_ts 48.A.B.0/24 has A and B in
	// 0..254 and carrier 123.0.(i/255).(i%255+1) stays inside 123.0.0.0/16.
	MaxTunnelsTest0 = 255 * 255
	// MaxTunnelsRouted is two less: the routed carrier 123.2.(i/255+1).(i%255+1)
	// is the /16's broadcast address 123.2.255.255 for i = 65,024 and would
	// need a third octet of 256 for i = 65,025.
	MaxTunnelsRouted = 255*255 - 2
)

// Defaults of the BlueField-3 benchmark.
const (
	DefaultESP       = "aes256gcm128-esn"
	DefaultIKE       = "aes256-sha256-modp2048"
	DefaultHWOffload = "packet"
)

// Spec is what `sluice swan gen` is asked for. It is also saved next to the
// generated files (sluice-swan.json) so that `sluice swan up --dir` rebuilds
// exactly the same connections.
type Spec struct {
	Topology  string `json:"topology"`
	Role      string `json:"role"`
	Ports     []int  `json:"ports"` // test0: [0]; routed: [0], [1] or [0 1]
	Tunnels   int    `json:"tunnels"`
	ESP       string `json:"esp_proposals"`
	IKE       string `json:"proposals"`
	HWOffload string `json:"hw_offload"` // no|crypto|packet|auto
	// Encap forces UDP encapsulation of ESP (encap = yes): needed by the
	// kernel-libipsec plugin (userspace ESP over TUN) and through NAT.
	Encap bool `json:"encap,omitempty"`
	// PSKFile is where the pre-shared key is read from (relative paths are
	// relative to the directory holding sluice-swan.json).
	PSKFile string `json:"psk_file"`
}

// Tunnel is one generated connection with its single child and secret.
type Tunnel struct {
	Index      int          `json:"index"`
	Port       int          `json:"port"`
	Conn       string       `json:"conn"`
	Child      string       `json:"child"`
	Secret     string       `json:"secret"`
	LocalAddr  netip.Addr   `json:"local_addr"`
	RemoteAddr netip.Addr   `json:"remote_addr"`
	LocalID    string       `json:"local_id"`
	RemoteID   string       `json:"remote_id"`
	LocalTS    netip.Prefix `json:"local_ts"`
	RemoteTS   netip.Prefix `json:"remote_ts"`
}

// Normalize fills defaults (ESP, IKE and hw_offload as in the BlueField-3 benchmark; port 0
// for test0, both ports for routed).
func (s *Spec) Normalize() {
	if s.ESP == "" {
		s.ESP = DefaultESP
	}
	if s.IKE == "" {
		s.IKE = DefaultIKE
	}
	if s.HWOffload == "" {
		s.HWOffload = DefaultHWOffload
	}
	if len(s.Ports) == 0 {
		if s.Topology == TopologyRouted {
			s.Ports = []int{0, 1}
		} else {
			s.Ports = []int{0}
		}
	}
}

// MaxTunnels is the largest tunnel count per port the topology's addressing holds.
func MaxTunnels(topology string) int {
	if topology == TopologyRouted {
		return MaxTunnelsRouted
	}
	return MaxTunnelsTest0
}

// Validate checks a normalized spec; errors name the flag and the fix.
func (s *Spec) Validate() error {
	switch s.Topology {
	case TopologyTest0, TopologyRouted:
	case "":
		return errors.New("--topology is required: test0 (the BlueField-3 benchmark tests 0-3: one tunnel port) or routed (test 4: two ports behind a router)")
	default:
		return fmt.Errorf("--topology %q: use test0 or routed", s.Topology)
	}
	switch s.Role {
	case RoleGW0, RoleGW1:
	case "":
		return errors.New("--role is required: gw0 (the concentrator, initiates) or gw1 (one carrier address per tunnel)")
	default:
		return fmt.Errorf("--role %q: use gw0 or gw1", s.Role)
	}
	for i, p := range s.Ports {
		if slices.Contains(s.Ports[:i], p) {
			return fmt.Errorf("--port p%d is given twice", p)
		}
		if p != 0 && p != 1 {
			return fmt.Errorf("--port p%d: use p0 or p1", p)
		}
		if p == 1 && s.Topology == TopologyTest0 {
			return errors.New("--port p1: topology test0 has one tunnel port (p0; p1 is the cleartext side); use --topology routed for tunnels on both ports")
		}
	}
	if s.Tunnels < 1 {
		return fmt.Errorf("--tunnels %d: give at least 1", s.Tunnels)
	}
	if max := MaxTunnels(s.Topology); s.Tunnels > max {
		if s.Topology == TopologyRouted {
			return fmt.Errorf("--tunnels %d: the routed topology holds at most %d tunnels per port: carrier 123.2.(i/255+1).(i%%255+1) is the broadcast address 123.2.255.255 for tunnel 65,024 and has no valid third octet (256) for 65,025", s.Tunnels, max)
		}
		return fmt.Errorf("--tunnels %d: the BlueField-3 benchmark's addressing holds at most %d = 255 x 255 tunnels: remote_ts 48.A.B.0/24 has A and B in 0..254, and carriers 123.0.(i/255).(i%%255+1) fill 123.0.0.0/16", s.Tunnels, max)
	}
	if _, ok := hwOffloadConf[s.HWOffload]; !ok {
		return fmt.Errorf("--hw-offload %q: use no, crypto, packet or auto", s.HWOffload)
	}
	for flag, v := range map[string]string{"--esp": s.ESP, "--ike": s.IKE} {
		// Any white space or control character (\r, \v, U+2028...) ends a
		// token in swanctl.conf, not just the ASCII ones (FuzzLoadSpec).
		if strings.ContainsAny(v, "{}=\"'#") || strings.IndexFunc(v, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
			return fmt.Errorf("%s %q: a proposal is one token such as %s (join several with commas)", flag, v, DefaultESP)
		}
	}
	return nil
}

// HWOffloadConf is the swanctl.conf value for the spec's --hw-offload.
func (s *Spec) HWOffloadConf() string { return hwOffloadConf[s.HWOffload] }

// Count is the number of tunnels the spec makes (tunnels x ports).
func (s *Spec) Count() int { return s.Tunnels * len(s.Ports) }

func addr4(a, b, c, d int) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(a), byte(b), byte(c), byte(d)})
}

// GatewayAddr is gw0's tunnel address on a port (123.0.0.1; routed p1: 123.1.0.1).
func (s *Spec) GatewayAddr(port int) netip.Addr { return addr4(123, port, 0, 1) }

// CarrierAddr is gw1's tunnel address for tunnel i on a port.
func (s *Spec) CarrierAddr(port, i int) netip.Addr {
	if s.Topology == TopologyRouted {
		return addr4(123, 2+port, i/255+1, i%255+1)
	}
	return addr4(123, 0, i/255, i%255+1)
}

// ProtectedNet is gw0's side (16.0.0.0/8; routed p1: 17.0.0.0/8).
func ProtectedNet(port int) netip.Prefix {
	return netip.PrefixFrom(addr4(16+port, 0, 0, 0), 8)
}

// RemoteNet is tunnel i's /24 behind gw1 (48.x.y.0/24; routed p1: 49.x.y.0/24).
func RemoteNet(port, i int) netip.Prefix {
	return netip.PrefixFrom(addr4(48+port, (i-1)/255, (i-1)%255, 0), 24)
}

// Names returns the connection, child and secret names of tunnel i: the
// benchmark's tunnelI/tnlI/ike-tnlI for test0, tunnel-P-I/tnl-P-I/ike-tnl-P-I for routed.
func (s *Spec) Names(port, i int) (conn, child, secret string) {
	if s.Topology == TopologyRouted {
		return fmt.Sprintf("tunnel-%d-%d", port, i), fmt.Sprintf("tnl-%d-%d", port, i), fmt.Sprintf("ike-tnl-%d-%d", port, i)
	}
	return fmt.Sprintf("tunnel%d", i), fmt.Sprintf("tnl%d", i), fmt.Sprintf("ike-tnl%d", i)
}

// Tunnel builds tunnel i (1-based) on a port from this side's point of view.
func (s *Spec) Tunnel(port, i int) Tunnel {
	t := Tunnel{Index: i, Port: port}
	t.Conn, t.Child, t.Secret = s.Names(port, i)
	gw, carrier := s.GatewayAddr(port), s.CarrierAddr(port, i)
	gwID, peerID := "ipsecgw-0", fmt.Sprintf("ipsecgw-%d", i)
	if s.Role == RoleGW0 {
		t.LocalAddr, t.RemoteAddr = gw, carrier
		t.LocalID, t.RemoteID = gwID, peerID
		t.LocalTS, t.RemoteTS = ProtectedNet(port), RemoteNet(port, i)
	} else {
		t.LocalAddr, t.RemoteAddr = carrier, gw
		t.LocalID, t.RemoteID = peerID, gwID
		t.LocalTS, t.RemoteTS = RemoteNet(port, i), ProtectedNet(port)
	}
	return t
}

// All returns every tunnel of the spec, port by port, in index order.
func (s *Spec) All() []Tunnel {
	out := make([]Tunnel, 0, s.Count())
	for _, p := range s.Ports {
		for i := 1; i <= s.Tunnels; i++ {
			out = append(out, s.Tunnel(p, i))
		}
	}
	return out
}
