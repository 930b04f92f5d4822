// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"text/template"
)

// TRexOptions shape the TRex STL profile.
type TRexOptions struct {
	// Tunnels is the number of remote subnets 48.x.y.0/24 the
	// destinations spread over (the lab's --tunnels).
	Tunnels int
	// TotalPPS, when > 0, scales the streams to this total rate at
	// multiplier 1; otherwise each stream keeps its weight as pps (the
	// MNO tables then run at their measured rates).
	TotalPPS float64
}

// TRexProfile writes the profile as a TRex STL Python profile, so that a
// hardware lab sends the same mix, sizes and flows with TRex (and its -m
// multiplier or trex-runner's steps).
//
// TRex builds frames without the FCS and its NIC adds it, so the sizes are
// the profile's frame lengths without FCS. The destinations are exactly
// the built-in generator's (Destinations: hosts .1 to .dst-hosts of every
// tunnel's subnet, consecutive packets to different tunnels), written as
// one flow variable over that list: two octet counters stepping on their
// own would also reach 48.a.b.0/24 subnets no tunnel has (about half the
// traffic with 256 tunnels), since the lab numbers tunnels 255 per second
// octet.
func TRexProfile(p *Profile, o TRexOptions) ([]byte, error) {
	if o.Tunnels < 1 {
		o.Tunnels = 1
	}
	if p.Flows.Spread == SpreadPerClient {
		return nil, fmt.Errorf("profile %s: flows.spread per-client is not rendered for TRex yet (its field engine would need the destination tied to the source); use sluice's own generator (bench run, bench compare)", p.Name)
	}
	src := netip.MustParseAddr(p.Flows.Src)
	last := src
	for i := 1; i < p.Flows.SrcCount; i++ {
		last = last.Next()
	}
	type stream struct {
		Size int
		PPS  float64
	}
	var streams []stream
	shares := p.Shares()
	for i, s := range p.Streams {
		pps := s.share()
		if o.TotalPPS > 0 {
			pps = o.TotalPPS * shares[i]
		}
		streams = append(streams, stream{Size: p.FrameLen(s), PPS: pps})
	}
	var dsts []string
	for _, a := range Destinations(o.Tunnels, p.Flows.DstHosts) {
		b := a.As4()
		dsts = append(dsts, fmt.Sprint(uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3])))
	}
	var buf bytes.Buffer
	err := trexTmpl.Execute(&buf, map[string]any{
		"P": p, "Streams": streams, "SrcFirst": src.String(), "SrcLast": last.String(),
		"Dsts": strings.Join(dsts, ", "), "NDst": len(dsts), "Tunnels": o.Tunnels, "LastTunnel": lastTunnel(o.Tunnels),
		"SPortMax": p.Flows.SPort + p.Flows.SPortCount - 1, "DPortMax": p.Flows.DPort + p.Flows.DPortCount - 1,
		"Desc": strings.ReplaceAll(p.Description, `"`, `'`),
	})
	return buf.Bytes(), err
}

var trexTmpl = template.Must(template.New("trex").Funcs(template.FuncMap{
	"f": func(v float64) string { return fmt.Sprintf("%g", v) },
}).Parse(`# TRex STL profile written by 'sluice bench trex-profile' from {{.P.Name}}
# ({{.Desc}}; source {{.P.Source}}).
# Sizes are frames without FCS (TRex's NIC appends it); the profile file states
# its sizes {{if eq .P.FCS "included"}}with{{else}}without{{end}} FCS.
# Flows: sources {{.SrcFirst}}-{{.SrcLast}}; destinations hosts .1-.{{.P.Flows.DstHosts}} of each of the
# {{.Tunnels}} tunnel subnet(s) 48.0.0.0/24 to {{.LastTunnel}} ({{.NDst}} addresses, the same list and
# order as sluice's own generator); source ports {{.P.Flows.SPort}}-{{.SPortMax}}, destination ports {{.P.Flows.DPort}}-{{.DPortMax}}.
#
#   trex-console> start -f {{.P.Name}}.py -m 1 --port 0
from trex_stl_lib.api import *


# Destination addresses as integers, in the order packets use them.
DESTINATIONS = [{{.Dsts}}]


class SluiceProfile(object):
    streams_def = [
{{- range .Streams}}
        {"size": {{.Size}}, "pps": {{f .PPS}}},
{{- end}}
    ]

    def vm(self):
        return STLScVmRaw([
            STLVmFlowVar(name="src", min_value="{{.SrcFirst}}", max_value="{{.SrcLast}}", size=4, op="inc"),
            STLVmWrFlowVar(fv_name="src", pkt_offset="IP.src"),
            STLVmFlowVar(name="dst", value_list=DESTINATIONS, size=4, op="inc"),
            STLVmWrFlowVar(fv_name="dst", pkt_offset="IP.dst"),
            STLVmFlowVar(name="sport", min_value={{.P.Flows.SPort}}, max_value={{.SPortMax}}, size=2, op="inc"),
            STLVmWrFlowVar(fv_name="sport", pkt_offset="UDP.sport"),
            STLVmFlowVar(name="dport", min_value={{.P.Flows.DPort}}, max_value={{.DPortMax}}, size=2, op="inc"),
            STLVmWrFlowVar(fv_name="dport", pkt_offset="UDP.dport"),
            STLVmFixIpv4(offset="IP"),
        ])

    def create_stream(self, size, pps):
        base = Ether() / IP(src="{{.SrcFirst}}", dst="48.0.0.1") / UDP(sport={{.P.Flows.SPort}}, dport={{.P.Flows.DPort}}, chksum=0)
        pad = max(0, size - len(base)) * "x"
        return STLStream(packet=STLPktBuilder(pkt=base / pad, vm=self.vm()), mode=STLTXCont(pps=pps))

    def get_streams(self, direction=0, **kwargs):
        return [self.create_stream(s["size"], s["pps"]) for s in self.streams_def]


def register():
    return SluiceProfile()
`))

// lastTunnel is the last tunnel's subnet.
func lastTunnel(n int) string {
	a := Destinations(n, 1)
	b := a[len(a)-1].As4()
	b[3] = 0
	return netip.AddrFrom4(b).String() + "/24"
}
