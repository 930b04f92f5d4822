// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"fmt"
	"net/netip"
	"strings"
)

// Topologies.
const (
	Forwarder   = "forwarder"
	GatewayPair = "gateway-pair"
	OverlayPair = "overlay-pair"
	// Direct joins the generator to the sink, with nothing in between:
	// it measures the generator and the sink themselves.
	Direct = "direct"
	// GatewayModel puts the NIC model under a sluice gateway (model.go).
	GatewayModel = "gateway-model"
)

// Topologies lists the topologies Up knows, in the order --help shows them.
var Topologies = []string{Forwarder, GatewayPair, OverlayPair, GatewayModel, Direct}

// MaxTunnels is the largest --tunnels (the range; the BlueField-3 benchmark's address plan
// itself reaches 255*255).
const MaxTunnels = 8192

// The addresses of the BlueField-3 benchmark's address plan (the BlueField-3 benchmark, Test 0): the generator's side
// is 10.0.0.0/24 with clients 16.0.0.0/8 behind 10.0.0.1, the sink's side
// 11.0.0.0/24 with 48.0.0.0/8 behind 11.0.0.1, tunnel endpoints in 123.0/16.
var (
	GenAddr      = netip.MustParseAddr("10.0.0.1")
	GenGateway   = netip.MustParseAddr("10.0.0.254")
	SinkAddr     = netip.MustParseAddr("11.0.0.1")
	SinkGateway  = netip.MustParseAddr("11.0.0.254")
	LocalTunnel  = netip.MustParseAddr("123.0.0.1")
	ClientPrefix = netip.MustParsePrefix("16.0.0.0/8")
	RemotePrefix = netip.MustParsePrefix("48.0.0.0/8")
)

// TunnelPeer is tunnel i's remote endpoint (1-based), as the BlueField-3 benchmark's
// scripts number them: 123.0.(i/255).(i%255+1).
func TunnelPeer(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{123, 0, byte(i / 255), byte(i%255 + 1)})
}

// TunnelSubnet is the remote traffic selector of tunnel i (1-based):
// 48.((i-1)/255).((i-1)%255).0/24.
func TunnelSubnet(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{48, byte((i - 1) / 255), byte((i - 1) % 255), 0}), 24)
}

// endpoint is one end of a veth pair.
type endpoint struct {
	Role, If, MAC string
}

type segment struct{ A, B endpoint }

// hop is a forwarding step inside a node: frames arriving on In leave on
// Out towards the next hop's MAC. Forwarders are installed per hop.
type hop struct {
	Role, In, Out, NextMAC string
}

// plan is everything Up makes, derived from the Spec alone.
type plan struct {
	roles    []string
	segments []segment
	forward  []string            // roles that forward (ip_forward=1)
	batch    map[string][]string // ip -batch lines per role, after the links exist
	hops     []hop
	genRole  string
	genIf    string
	sinkRole string
	sinkIf   string
	// target is where iperf3 and ping reach the sink side.
	target netip.Addr
	// overlay: the VTEPs and SAs come from 'sluice apply' (overlay.go).
	overlay bool
	// model: dut's wire is a NIC model pair, its SAs packet-offloaded
	// there (model.go).
	model bool
}

func mac(seg, side int) string { return fmt.Sprintf("02:51:ce:00:%02x:%02x", seg, side) }

func buildPlan(s Spec) (*plan, error) {
	p := &plan{batch: map[string][]string{}, genRole: "gen", genIf: "g0", sinkRole: "sink", sinkIf: "s0", target: SinkAddr}
	add := func(role string, lines ...string) { p.batch[role] = append(p.batch[role], lines...) }
	switch s.Topology {
	case Forwarder:
		p.roles = []string{"gen", "dut", "sink"}
		p.forward = []string{"dut"}
		g0, lan0 := endpoint{"gen", "g0", mac(1, 1)}, endpoint{"dut", "lan0", mac(1, 2)}
		wan0, s0 := endpoint{"dut", "wan0", mac(2, 1)}, endpoint{"sink", "s0", mac(2, 2)}
		p.segments = []segment{{g0, lan0}, {wan0, s0}}
		add("gen", "addr replace 10.0.0.1/24 dev g0",
			"route replace default via 10.0.0.254 dev g0",
			"neigh replace 10.0.0.254 lladdr "+lan0.MAC+" dev g0 nud permanent")
		add("dut", "addr replace 10.0.0.254/24 dev lan0", "addr replace 11.0.0.254/24 dev wan0",
			"route replace 16.0.0.0/8 via 10.0.0.1 dev lan0",
			"route replace 48.0.0.0/8 via 11.0.0.1 dev wan0",
			// The tunnels' endpoints, as on a gateway: its own (the
			// SAs' source) and a route to the peers through the wire.
			// Without them the kernel could not send into the SAs
			// (xfrm_lookup finds no route), and the fast path, which
			// sizes each SA from that route, forwards nothing (sa-mtu).
			"addr replace "+LocalTunnel.String()+"/32 dev wan0",
			"route replace 123.0.0.0/16 via 11.0.0.1 dev wan0",
			"neigh replace 10.0.0.1 lladdr "+g0.MAC+" dev lan0 nud permanent",
			"neigh replace 11.0.0.1 lladdr "+s0.MAC+" dev wan0 nud permanent")
		add("sink", "addr replace 11.0.0.1/24 dev s0",
			"route replace default via 11.0.0.254 dev s0",
			"neigh replace 11.0.0.254 lladdr "+wan0.MAC+" dev s0 nud permanent")
		p.hops = []hop{{"dut", "lan0", "wan0", s0.MAC}}
	case GatewayPair:
		p.roles = []string{"gen", "gw0", "gw1", "sink"}
		p.forward = []string{"gw0", "gw1"}
		g0, gw0p1 := endpoint{"gen", "g0", mac(1, 1)}, endpoint{"gw0", "p1", mac(1, 2)}
		gw0p0, gw1p0 := endpoint{"gw0", "p0", mac(2, 1)}, endpoint{"gw1", "p0", mac(2, 2)}
		gw1p1, s0 := endpoint{"gw1", "p1", mac(3, 1)}, endpoint{"sink", "s0", mac(3, 2)}
		p.segments = []segment{{g0, gw0p1}, {gw0p0, gw1p0}, {gw1p1, s0}}
		add("gen", "addr replace 10.0.0.1/24 dev g0",
			"route replace default via 10.0.0.254 dev g0",
			"neigh replace 10.0.0.254 lladdr "+gw0p1.MAC+" dev g0 nud permanent")
		add("gw0", "addr replace 10.0.0.254/24 dev p1", "addr replace 123.0.0.1/16 dev p0",
			"route replace 16.0.0.0/8 via 10.0.0.1 dev p1",
			"neigh replace 10.0.0.1 lladdr "+g0.MAC+" dev p1 nud permanent")
		for i := 1; i <= s.Tunnels; i++ {
			// IPSEC-GW-1 holds every tunnel's endpoint on its p0.
			add("gw1", fmt.Sprintf("addr replace %s/16 dev p0", TunnelPeer(i)))
		}
		add("gw1", "addr replace 11.0.0.254/24 dev p1",
			"route replace 48.0.0.0/8 via 11.0.0.1 dev p1",
			"route replace 16.0.0.0/8 via 123.0.0.1 dev p0",
			"route replace 10.0.0.0/24 via 123.0.0.1 dev p0",
			"neigh replace 11.0.0.1 lladdr "+s0.MAC+" dev p1 nud permanent",
			"neigh replace 123.0.0.1 lladdr "+gw0p0.MAC+" dev p0 nud permanent")
		for i := 1; i <= s.Tunnels; i++ {
			peer := TunnelPeer(i)
			// The BlueField-3 benchmark's IPSEC-GW-0 reaches each remote subnet through
			// its tunnel; on veth the tunnel is the wire itself.
			add("gw0", fmt.Sprintf("route replace %s via %s dev p0", TunnelSubnet(i), peer),
				fmt.Sprintf("neigh replace %s lladdr %s dev p0 nud permanent", peer, gw1p0.MAC))
		}
		add("sink", "addr replace 11.0.0.1/24 dev s0",
			"route replace default via 11.0.0.254 dev s0",
			"neigh replace 11.0.0.254 lladdr "+gw1p1.MAC+" dev s0 nud permanent")
		p.hops = []hop{{"gw0", "p1", "p0", gw1p0.MAC}, {"gw1", "p0", "p1", s0.MAC}}
	case Direct:
		p.roles = []string{"gen", "sink"}
		g0, s0 := endpoint{"gen", "g0", mac(1, 1)}, endpoint{"sink", "s0", mac(1, 2)}
		p.segments = []segment{{g0, s0}}
		add("gen", "addr replace 10.0.0.1/24 dev g0",
			"route replace default via 10.0.0.254 dev g0",
			"neigh replace 10.0.0.254 lladdr "+s0.MAC+" dev g0 nud permanent")
		p.target = GenGateway
		add("sink", "addr replace 10.0.0.254/24 dev s0",
			"neigh replace 10.0.0.1 lladdr "+g0.MAC+" dev s0 nud permanent")
	case GatewayModel:
		modelPlan(p, add)
	case OverlayPair:
		// Only the underlay is the lab's: the VTEPs, routes to them and
		// SAs are 'sluice apply' of generated host files (overlay.go).
		p.roles = []string{"h0", "h1"}
		p.genRole, p.genIf, p.sinkRole, p.sinkIf = "h0", "p0", "h1", "p0"
		h0, h1 := endpoint{"h0", "p0", mac(1, 1)}, endpoint{"h1", "p0", mac(1, 2)}
		p.segments = []segment{{h0, h1}}
		p.overlay = true
		add("h0", fmt.Sprintf("addr replace %s/24 dev p0", OverlayUnderlay0),
			fmt.Sprintf("route replace 123.0.0.0/16 via %s dev p0", OverlayUnderlay1))
		add("h1", fmt.Sprintf("addr replace %s/24 dev p0", OverlayUnderlay1),
			fmt.Sprintf("route replace %s/32 via %s dev p0", LocalTunnel, OverlayUnderlay0))
		p.target = OverlayAddr(1, 1)
	default:
		return nil, fmt.Errorf("topology %q is unknown: use one of %s", s.Topology, strings.Join(Topologies, ", "))
	}
	// Links up first: routes through a link need its connected route.
	up := map[string][]string{}
	for _, r := range p.roles {
		up[r] = []string{"link set lo up"}
	}
	for _, seg := range p.segments {
		for _, e := range []endpoint{seg.A, seg.B} {
			up[e.Role] = append(up[e.Role], "link set "+e.If+" up")
		}
	}
	for _, r := range p.roles {
		p.batch[r] = append(up[r], p.batch[r]...)
	}
	return p, nil
}

// NeedsVMError says the host kernel lacks a feature a topology needs.
type NeedsVMError struct {
	Topology, Feature string
}

func (e *NeedsVMError) Error() string {
	return fmt.Sprintf("topology %s needs what this kernel lacks: %s; run it in the test VM with --vm, e.g. 'sluice lab up %s --vm -- sluice bench ping --lab lab'", e.Topology, e.Feature, e.Topology)
}
