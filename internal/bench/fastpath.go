package bench

import (
	"fmt"
	"net/netip"

	"sluice/internal/fastpath"
	"sluice/internal/kernel"
)

// FastpathResult is one measurement of `sluice bench fastpath`.
type FastpathResult struct {
	Tunnels     int     `json:"tunnels"`  // each: one OUT, one IN and one FWD policy, like strongSwan
	Policies    int     `json:"policies"` // total XFRM policies mirrored
	Case        string  `json:"case"`     // outbound-match, inbound-match, no-match
	NsPerPacket float64 `json:"ns_per_packet"`
	Action      string  `json:"action"`
	Reason      string  `json:"reason"`
}

// tunnelSnapshot builds n strongSwan-style tunnels: 16.0.0.0/8 <-> 48.x.y.0/24,
// each SA packet-offloaded on wan.
func tunnelSnapshot(n, wan int) fastpath.Snapshot {
	var s fastpath.Snapshot
	local := netip.MustParseAddr("123.0.0.1")
	lan := netip.MustParsePrefix("16.0.0.0/8")
	for i := 0; i < n; i++ {
		remote := netip.PrefixFrom(netip.AddrFrom4([4]byte{48, byte(i >> 8), byte(i), 0}), 24)
		peer := netip.AddrFrom4([4]byte{123, 2, byte(i >> 8), byte(i)})
		reqid := uint32(i + 1)
		out := &kernel.Offload{Ifindex: wan, Flags: kernel.OffloadPacket}
		in := &kernel.Offload{Ifindex: wan, Flags: kernel.OffloadPacket | kernel.OffloadInbound}
		base := uint32(i+1) << 3
		s.Policies = append(s.Policies,
			kernel.Policy{Index: base | 1, Dir: kernel.DirOut, Priority: 1000, Sel: kernel.Selector{Src: lan, Dst: remote},
				Tmpls: []kernel.Tmpl{{Src: local, Dst: peer, Proto: 50, Mode: 1, Reqid: reqid}}, Offload: out},
			kernel.Policy{Index: base, Dir: kernel.DirIn, Priority: 1000, Sel: kernel.Selector{Src: remote, Dst: lan},
				Tmpls: []kernel.Tmpl{{Src: peer, Dst: local, Proto: 50, Mode: 1, Reqid: reqid}}, Offload: in},
			kernel.Policy{Index: base | 2, Dir: kernel.DirFwd, Priority: 1000, Sel: kernel.Selector{Src: remote, Dst: lan},
				Tmpls: []kernel.Tmpl{{Src: peer, Dst: local, Proto: 50, Mode: 1, Reqid: reqid}}})
		s.States = append(s.States,
			kernel.State{Src: local, Dst: peer, Proto: 50, SPI: 0x10000 + reqid, Reqid: reqid, Mode: 1, Offload: out},
			kernel.State{Src: peer, Dst: local, Proto: 50, SPI: 0x20000 + reqid, Reqid: reqid, Mode: 1, Offload: in})
	}
	return s
}

// Fastpath measures the program's cost per packet for each tunnel count.
// It needs root: it loads the program and builds a scratch namespace whose
// routes make the FIB lookups succeed, as on a gateway.
func Fastpath(tunnels []int, repeat int) ([]FastpathResult, error) {
	sg, err := kernel.NewScratchGateway()
	if err != nil {
		return nil, err
	}
	defer sg.Close()
	var results []FastpathResult
	err = sg.Do(func() error {
		dp, err := fastpath.Load(fastpath.LoadOptions{})
		if err != nil {
			return err
		}
		defer dp.Close()
		// BPF_PROG_RUN delivers on loopback: treat it as the LAN port.
		if err := dp.SetIfaces([]fastpath.Iface{{Ifindex: 1, L2: fastpath.L2NIC}, {Ifindex: sg.WANIndex, L2: fastpath.L2NIC}}); err != nil {
			return err
		}
		for _, n := range tunnels {
			snap := tunnelSnapshot(n, sg.WANIndex)
			tables, err := fastpath.Compile(snap)
			if err != nil {
				return err
			}
			if err := dp.Apply(tables); err != nil {
				return err
			}
			last := n - 1
			cases := []struct {
				name string
				pkt  fastpath.Packet
			}{
				{"outbound-match", udp("16.0.0.1", fmt.Sprintf("48.%d.%d.9", last>>8&0xff, last&0xff))},
				{"inbound-match", udp(fmt.Sprintf("48.%d.%d.9", last>>8&0xff, last&0xff), "16.0.0.1")},
				{"no-match", udp("16.0.0.1", "49.0.0.1")},
			}
			for _, c := range cases {
				frame, err := c.pkt.Marshal()
				if err != nil {
					return err
				}
				d, err := dp.Explain(frame, 0)
				if err != nil {
					return err
				}
				_, per, err := dp.Benchmark(frame, repeat)
				if err != nil {
					return err
				}
				results = append(results, FastpathResult{Tunnels: n, Policies: len(snap.Policies), Case: c.name,
					NsPerPacket: float64(per.Nanoseconds()), Action: d.ActionName, Reason: d.ReasonName})
			}
		}
		return nil
	})
	return results, err
}

func udp(src, dst string) fastpath.Packet {
	return fastpath.Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: 17,
		SPort: 1234, DPort: 5678, TTL: 64, Payload: 18}
}
