// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"strings"
	"testing"

	"sluice/internal/kernel/xfrm"
)

// TestSAsTheKernelChoosesPerPacketAreNotForwarded: packet-offloaded SAs on
// the policy's own device, which the fast path would forward through, but
// which the kernel picks per packet (per-CPU sets) or would drop that way
// (XFRMA_SA_DIR against the policy's direction), or which are not plain
// ESP tunnel mode (IP-TFS): the policy must be left to the kernel, with
// the reason explain prints.
func TestSAsTheKernelChoosesPerPacketAreNotForwarded(t *testing.T) {
	const dev = 7
	out := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.1.0/24", 100, "123.2.0.1", 1, dev)
	fwd := tunnelPolicy(xfrm.DirFwd, "48.0.1.0/24", "10.0.0.0/8", 100, "123.2.0.1", 2, dev)
	if got := OffloadDevice(&out, []xfrm.State{saFor(out, dev)}); got != dev {
		t.Fatalf("one plain SA: device %d, want %d (the test's premise)", got, dev)
	}
	perCPU := func(p xfrm.Policy) []xfrm.State {
		var ss []xfrm.State
		for cpu := range uint32(2) {
			st := saFor(p, dev)
			st.SPI += cpu
			st.PerCPU, st.CPU = true, cpu
			ss = append(ss, st)
		}
		return ss
	}
	withDir := func(p xfrm.Policy, d xfrm.SADir) []xfrm.State {
		st := saFor(p, dev)
		st.Dir = d
		return []xfrm.State{st}
	}
	iptfs := out
	iptfs.Tmpls = []xfrm.Tmpl{out.Tmpls[0]}
	iptfs.Tmpls[0].Mode = xfrm.ModeIPTFS
	iptfsSA := saFor(iptfs, dev)
	iptfsSA.Mode = xfrm.ModeIPTFS
	for _, tc := range []struct {
		name   string
		p      xfrm.Policy
		states []xfrm.State
		says   string // "" when forwardable
	}{
		{"out, SA dir out", out, withDir(out, xfrm.SADirOut), ""},
		{"fwd, SA dir in", fwd, withDir(fwd, xfrm.SADirIn), ""},
		{"out, per-CPU SAs", out, perCPU(out), "per-CPU (cpu 0)"},
		{"fwd, per-CPU SAs", fwd, perCPU(fwd), "per-CPU"},
		{"out, one per-CPU SA beside a plain one", out, append(perCPU(out)[1:], saFor(out, dev)), "per-CPU (cpu 1)"},
		{"out, SA dir in", out, withDir(out, xfrm.SADirIn), "direction in, the policy is out"},
		{"fwd, SA dir out", fwd, withDir(fwd, xfrm.SADirOut), "direction out, the policy is fwd"},
		{"IP-TFS", iptfs, []xfrm.State{iptfsSA}, "IP-TFS"},
	} {
		got, why := OffloadDevice(&tc.p, tc.states), ForwardRefusal(&tc.p, tc.states)
		if tc.says == "" {
			if got != dev || why != "" {
				t.Errorf("%s: device %d (%q), want %d", tc.name, got, why, dev)
			}
			continue
		}
		if got != 0 || !strings.Contains(why, tc.says) {
			t.Errorf("%s: device %d, reason %q; want 0 and a reason saying %q", tc.name, got, why, tc.says)
		}
	}
}
