// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"fmt"
	"os/user"
	"strconv"

	"sluice/internal/api"
	"sluice/internal/config"
	"sluice/internal/driverquirk"
	"sluice/internal/fastpath"
	"sluice/internal/flower"
	"sluice/internal/kernel/xfrm"
)

// FromConfig translates gateway.yaml into the daemon's options; build is
// what `show gateway` and the metrics report as this binary's version.
// Interface names resolve in the calling process's network namespace.
func FromConfig(g *config.Gateway, build api.Build) (Options, error) {
	o := Options{PinDir: g.PinDir, Lease: g.Lease, Counters: g.Counters,
		SourceName: string(g.PolicySource), APISocket: g.APISocket, MetricsListen: g.MetricsListen,
		TopPolicies: g.MetricsTopPolicies,
		APIOptions:  api.SocketOptions{Mode: 0o660, UID: -1, GID: -1},
		Build:       build,
	}
	if g.APIOwner != "" {
		u, err := user.Lookup(g.APIOwner)
		if err != nil {
			return o, fmt.Errorf("%s:%d: api-owner: %w (create the user or choose an existing one)", g.File, g.KeyLines["api-owner"], err)
		}
		o.APIOptions.UID, _ = strconv.Atoi(u.Uid)
	}
	if g.APIGroup != "" {
		grp, err := user.LookupGroup(g.APIGroup)
		if err != nil {
			return o, fmt.Errorf("%s:%d: api-group: %w (create the group or choose an existing one)", g.File, g.KeyLines["api-group"], err)
		}
		o.APIOptions.GID, _ = strconv.Atoi(grp.Gid)
	}
	// The config refuses flower-test-skip-hw without lab: true; checked
	// again here so no other path can build a software tier in production.
	if g.FlowerTestSkipHW && !g.Lab {
		return o, fmt.Errorf("%s: flower-test-skip-hw needs lab: true", g.File)
	}
	tier := &flower.Tier{SkipHW: g.FlowerTestSkipHW, InboundChain: g.FlowerInboundChain,
		UseTime: g.PolicySource != config.PolicySourceStatic}
	for _, n := range g.AcceptLeaks {
		// The only behaviour whose leak sluice itself keeps closed on a
		// gateway by holding back: a subnet selector or a fragment leaks
		// through the kernel too, accepting it would change nothing.
		if n != driverquirk.NoTXMissRule.String() {
			return o, fmt.Errorf("%s:%d: accept-leaks: %q: the gateway accepts only %s (the flower tier then puts outbound rules on such a device, and an SA's deletion may send cleartext until the rule is withdrawn; docs/flower.md); remove it",
				g.File, g.KeyLines["accept-leaks"], n, driverquirk.NoTXMissRule)
		}
		tier.AcceptNoTXMiss = true
	}
	if g.FlowerTestPlacementInterval != 0 && !g.Lab {
		return o, fmt.Errorf("%s: flower-test-placement-interval needs lab: true", g.File)
	}
	if g.FlowerPromotePPS > 0 {
		tier.Placement = flower.DefaultPlacement(float64(g.FlowerPromotePPS))
		if g.FlowerTestPlacementInterval != 0 {
			tier.Placement.Interval = g.FlowerTestPlacementInterval
		}
	}
	for n, i := range g.Interfaces {
		// Checked here, where the line is known, not when the daemon
		// resolves them (and before anything is attached).
		if _, err := link(i.Name); err != nil {
			return o, fmt.Errorf("%s:%d: interfaces[%d].name: %w", g.File, i.Line, n, err)
		}
		if i.HairpinToNexthop.IsValid() {
			if _, _, err := resolveNextHop(i.HairpinToNexthop); err != nil {
				return o, fmt.Errorf("%s:%d: interfaces[%d] (%s) hairpin-to-nexthop: %w", g.File, i.Line, n, i.Name, err)
			}
		}
		gi := Iface{
			Name:           i.Name,
			InboundForward: i.Inbound == config.InboundForward && i.WANAntispoof == config.AntispoofUpstream,
			HairpinNextHop: i.HairpinToNexthop,
		}
		if i.L2 == config.L2FIB {
			gi.L2 = fastpath.L2FIB
		}
		if i.XDPMode == config.XDPGeneric {
			gi.Mode = fastpath.XDPGeneric
		}
		o.Ifaces = append(o.Ifaces, gi)
		if i.Flower.Outbound() || i.Flower.Inbound() {
			tier.Ports = append(tier.Ports, flower.PortConfig{Name: i.Name, Outbound: i.Flower.Outbound(), Inbound: i.Flower.Inbound(),
				InboundForward: gi.InboundForward, TTL: i.FlowerTTL, L2FIB: i.L2 == config.L2FIB,
				HairpinNextHop: i.HairpinToNexthop, Budget: i.FlowerRuleBudget})
		}
	}
	if len(tier.Ports) > 0 {
		o.Hardware = tier
	}
	if g.PolicySource == config.PolicySourceStatic {
		snap, err := staticSnapshot(g)
		if err != nil {
			return o, err
		}
		o.Source = fastpath.StaticSource{Snap: snap}
	} else {
		o.Source = fastpath.KernelSource{X: &xfrm.Handle{}}
	}
	return o, nil
}

var configDirs = map[config.Direction]xfrm.Dir{config.DirIn: xfrm.DirIn, config.DirOut: xfrm.DirOut, config.DirFwd: xfrm.DirFwd}

// staticSnapshot turns the file's lab policies into what the kernel would
// report had strongSwan installed them: a policy with one tunnel-mode ESP
// template and, for IN and OUT, its SA.
func staticSnapshot(g *config.Gateway) (fastpath.Snapshot, error) {
	var s fastpath.Snapshot
	for i, sp := range g.Policies {
		dir := configDirs[sp.Dir]
		p := xfrm.Policy{
			Index: uint32(i+1)<<3 | uint32(dir), Dir: dir, Priority: sp.Priority,
			Sel: xfrm.Selector{Src: sp.Src, Dst: sp.Dst, Proto: uint8(sp.Proto)},
		}
		if sp.Sport != 0 {
			p.Sel.SPort, p.Sel.SPortMask = sp.Sport, 0xffff
		}
		if sp.Dport != 0 {
			p.Sel.DPort, p.Sel.DPortMask = sp.Dport, 0xffff
		}
		if sp.Action == config.ActionBlock {
			p.Action = xfrm.ActionBlock
			s.Policies = append(s.Policies, p)
			continue
		}
		tm := xfrm.Tmpl{Src: sp.Local, Dst: sp.Peer, Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, Reqid: sp.Reqid, Optional: sp.Optional}
		if dir != xfrm.DirOut {
			tm.Src, tm.Dst = sp.Peer, sp.Local
		}
		p.Tmpls = []xfrm.Tmpl{tm}
		var off *xfrm.Offload
		if sp.Offload == config.OffloadPacket {
			li, err := link(sp.OffloadDev)
			if err != nil {
				return s, fmt.Errorf("%s:%d: policies[%d].offload-dev: %w", g.File, sp.Line, i, err)
			}
			off = &xfrm.Offload{Ifindex: li.Ifindex, Flags: xfrm.OffloadPacket}
			if dir != xfrm.DirOut {
				off.Flags |= xfrm.OffloadInbound
			}
			if dir != xfrm.DirFwd { // FWD policies are never offloaded
				p.Offload = off
			}
		}
		s.Policies = append(s.Policies, p)
		if dir != xfrm.DirFwd {
			// AES-GCM-128 (strongSwan's esp=aes128gcm16, what the NICs
			// offload): the SA's size, and so its MTU, depends on it.
			s.States = append(s.States, xfrm.State{Src: tm.Src, Dst: tm.Dst, Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, Reqid: tm.Reqid,
				SPI: 0x100 + uint32(i), Offload: off, Alg: xfrm.StateAlg{AEAD: "rfc4106(gcm(aes))", ICVBits: 128}})
		}
	}
	return s, nil
}
