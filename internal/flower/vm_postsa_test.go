// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"net/netip"
	"testing"

	"sluice/internal/fastpath"
	"sluice/internal/flower"
)

// TestFlowerPostSA: the skip_hw flower rules on packets, past the SA. With
// kernel forwarding off on the gateway, only the rules move traffic, so
// what they hand to the host is lost and counted as missing at b:
//   - the SA's MTU (1446 for the lab's IPv4 SA over a 1500 route): a
//     1446-byte packet is forwarded, a 1447-byte one goes to the host
//     (act_police counts the Ethernet header: police mtu 1460). It policed
//     at 1500 before, and forwarded both;
//   - with use times on, the first packet of each second goes to the host
//     (the kernel would forward it and stamp the policies), the rest are
//     forwarded.
//
// Under each mlx5 profile (newFlowerLabOn).
func TestFlowerPostSA(t *testing.T) { underEachProfile(t, testFlowerPostSA) }

func testFlowerPostSA(t *testing.T, profile string) {
	l := newLab(t)
	f := newFlowerLab(t, l, profile)
	f.dropSAMisses(t, l)
	fs := openTC(t, f.gw)
	inst := &flower.Installer{SkipHW: true, FS: fs}
	install := func(t *testing.T, useTime bool) {
		t.Helper()
		res := flower.Derive(flower.Input{Views: fastpath.PolicyViews(f.snap), Ports: f.ports, Router: f.router, InboundChain: 1, UseTime: useTime, Quirks: f.quirks})
		if _, errs, err := inst.Apply(res.Rules); err != nil || len(errs) != 0 {
			t.Fatalf("apply: %v %v", errs, err)
		}
	}
	recv := listenUDP(t, f.b, "48.0.0.1:9999")
	dst := netip.MustParseAddr("48.0.0.1")
	step(t, "police at the SA's MTU", func(t *testing.T) {
		install(t, false)
		mustContain(t, run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress"), "police", "mtu 1460")
		sendSizedUDP(t, f.a, dst, 9999, 1446, 3)
		if n := recv(); n != 3 {
			t.Errorf("1446-byte packets: b received %d of 3", n)
		}
		sendSizedUDP(t, f.a, dst, 9999, 1447, 3)
		if n := recv(); n != 0 {
			t.Errorf("1447-byte packets: b received %d, want 0 (the host's: the kernel sends frag-needed)", n)
		}
	})
	step(t, "one packet a second to the host for the use times", func(t *testing.T) {
		inst.Apply(nil) // remove, then install with the use-time police
		install(t, true)
		mustContain(t, run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress"), "pkts_rate 1")
		checkUseTimePolice(t, f, dst, 9997)
	})
}
