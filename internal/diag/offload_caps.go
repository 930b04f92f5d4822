// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"slices"
	"sort"
	"strings"

	"sluice/internal/kernel/xfrm"
)

// probeCaps describes what a device accepted, per offload type and
// direction: "crypto: out transport, tunnel; in transport, tunnel".
type probeCaps struct {
	// accepted[offload][dir] lists the modes accepted.
	accepted map[string]map[string][]string
	// refused lists "offload mode dir: reason", sorted.
	refused []string
}

func capsOf(p xfrm.OffloadProbe) probeCaps {
	c := probeCaps{accepted: map[string]map[string][]string{"crypto": {}, "packet": {}}}
	for _, o := range []string{"crypto", "packet"} {
		for _, dir := range []string{"out", "in"} {
			for _, m := range []string{"transport", "tunnel"} {
				why, ok := p.Caps[xfrm.ProbeCap(o, m, dir)]
				switch {
				case !ok:
				case why == "":
					c.accepted[o][dir] = append(c.accepted[o][dir], m)
				default:
					c.refused = append(c.refused, xfrm.ProbeCap(o, m, dir)+": "+why)
				}
			}
		}
	}
	sort.Strings(c.refused)
	return c
}

// full reports every mode in both directions accepted.
func (c probeCaps) full(o string) bool {
	return len(c.accepted[o]["out"]) == 2 && len(c.accepted[o]["in"]) == 2
}

func (c probeCaps) any(o string) bool {
	return len(c.accepted[o]["out"]) > 0 || len(c.accepted[o]["in"]) > 0
}

// describe is "out transport, tunnel; in none" for offload o.
func (c probeCaps) describe(o string) string {
	var parts []string
	for _, dir := range []string{"out", "in"} {
		ms := c.accepted[o][dir]
		if len(ms) == 0 {
			ms = []string{"none"}
		}
		parts = append(parts, dir+" "+strings.Join(ms, ", "))
	}
	return o + ": " + strings.Join(parts, "; ")
}

// fix says how a host.yaml fits a device that offloads only part.
func (c probeCaps) fix(o string) string {
	var fixes []string
	out, in := c.accepted[o]["out"], c.accepted[o]["in"]
	switch {
	case len(out) == 0 && len(in) > 0:
		fixes = append(fixes, "offload the inbound SA only: offload-in: "+o+", offload-out: none (the ixgbevf VF-offload patches's advice for ixgbevf)")
	case len(in) == 0 && len(out) > 0:
		fixes = append(fixes, "offload the outbound SA only: offload-out: "+o+", offload-in: none")
	}
	if !slices.Contains(slices.Concat(out, in), "tunnel") {
		fixes = append(fixes, "use mode: transport (the device offloads no tunnel-mode SA), e.g. VXLAN over ESP transport as the ConnectX-6 SR-IOV guide does")
	} else if !slices.Contains(slices.Concat(out, in), "transport") {
		fixes = append(fixes, "use mode: tunnel (the device offloads no transport-mode SA)")
	}
	if len(fixes) == 0 {
		return "offload only the combinations the device accepted (offload-out/offload-in, mode), or offload: auto, which falls back per SA"
	}
	return strings.Join(fixes, "; ") + "; or offload: auto, which falls back per SA"
}

// probeResult grades a probe that recorded every combination (Caps):
// capabilities per direction instead of one tunnel-mode outbound try, so
// a device that offloads only transport mode (ixgbe) or only inbound SAs
// (ixgbevf) is not reported as failing.
func probeResult(n string, p xfrm.OffloadProbe) Result {
	c := capsOf(p)
	ev := []string{"ip xfrm state add src 192.0.2.1 dst 198.51.100.1 (dir in: reversed) proto esp mode transport|tunnel aead 'rfc4106(gcm(aes))' ... offload [packet] dev " + n + " dir out|in, each deleted again",
		c.describe("crypto"), c.describe("packet")}
	ev = append(ev, c.refused...)
	switch {
	case !c.any("crypto"):
		return Result{Verdict: Fail, Subject: n, Summary: "esp-hw-offload is on, yet the driver refused every crypto-offload SA (either mode, either direction): " + p.Crypto, Evidence: ev,
			Fix: "see the bond-offload and esp-offload checks for " + n + "; for a bond, the active slave must offload ESP"}
	case !c.full("crypto"):
		v := Info
		summary := "crypto offload in part (" + c.describe("crypto") + ")"
		if !c.any("packet") {
			summary += "; no packet offload"
		}
		return Result{Verdict: v, Subject: n, Summary: summary + ": configure only what it accepts", Evidence: ev, Fix: c.fix("crypto")}
	case !c.any("packet"):
		return Result{Verdict: Warn, Subject: n, Summary: "crypto offload only (both directions, both modes): packet offload refused (" + p.Packet + "); the sluice fast path needs packet offload", Evidence: ev,
			Fix: "packet offload needs a driver that implements it (mlx5 on ConnectX-6 Dx/7 with IPsec-enabled firmware, Linux 6.2+), flow_steering_mode dmfs, and no tc offload on the port first"}
	case !c.full("packet"):
		return Result{Verdict: Info, Subject: n, Summary: "crypto offload in every mode and direction; packet offload in part (" + c.describe("packet") + ")", Evidence: ev, Fix: c.fix("packet")}
	}
	return Result{Verdict: OK, Subject: n, Summary: "crypto- and packet-offload SAs accepted in both modes and directions (and removed)", Evidence: ev}
}
