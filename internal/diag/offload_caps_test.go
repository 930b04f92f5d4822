// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"strings"
	"testing"

	"sluice/internal/kernel/xfrm"
)

// probeOf builds a probe result: accept(offload, mode, dir) says which
// combinations the "driver" takes; the rest are refused with why.
func probeOf(accept func(o, m, d string) bool, why string) xfrm.OffloadProbe {
	p := xfrm.OffloadProbe{Caps: map[string]string{}}
	for _, o := range []string{"crypto", "packet"} {
		for _, m := range []string{"transport", "tunnel"} {
			for _, d := range []string{"out", "in"} {
				if !accept(o, m, d) {
					p.Caps[xfrm.ProbeCap(o, m, d)] = why
				} else {
					p.Caps[xfrm.ProbeCap(o, m, d)] = ""
				}
			}
		}
	}
	p.Crypto, p.Packet = p.Caps["crypto tunnel out"], p.Caps["packet tunnel out"]
	return p
}

// The probe reports capabilities per mode and direction: ixgbe (transport
// only) and ixgbevf (inbound only, the ixgbevf VF-offload patches) are not failures, and the fix
// says how to write host.yaml for them.
func TestOffloadProbePerCapability(t *testing.T) {
	for _, tc := range []struct {
		name    string
		probe   xfrm.OffloadProbe
		verdict Verdict
		summary string
		fix     string
	}{
		{"ixgbevf", probeOf(func(o, m, d string) bool { return o == "crypto" && m == "transport" && d == "in" }, "operation not supported"),
			Info, "crypto offload in part (crypto: out none; in transport); no packet offload", "offload-in: crypto, offload-out: none"},
		{"ixgbe", probeOf(func(o, m, d string) bool { return o == "crypto" && m == "transport" }, "invalid argument (Unsupported mode for ipsec offload)"),
			Info, "crypto: out transport; in transport", "use mode: transport"},
		{"netdevsim", probeOf(func(o, m, d string) bool { return o == "crypto" }, "operation not supported"),
			Warn, "crypto offload only (both directions, both modes): packet offload refused (operation not supported)", "flow_steering_mode dmfs"},
		{"mlx5", probeOf(func(o, m, d string) bool { return true }, ""), OK, "accepted in both modes and directions", ""},
		{"none", probeOf(func(o, m, d string) bool { return false }, "operation not supported"), Fail, "refused every crypto-offload SA", "active slave must offload ESP"},
	} {
		f := healthy()
		f.Probes = map[string]xfrm.OffloadProbe{"p0": tc.probe}
		rs := results(t, f, DoctorOptions{}, "offload-probe")
		if len(rs) != 1 || rs[0].Verdict != tc.verdict || !strings.Contains(rs[0].Summary, tc.summary) || !strings.Contains(rs[0].Fix, tc.fix) {
			t.Errorf("%s: %+v\nwant %v %q fix %q", tc.name, rs, tc.verdict, tc.summary, tc.fix)
		}
	}
}
