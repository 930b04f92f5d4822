// SPDX-License-Identifier: Apache-2.0

package xfrm_test

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
	"sluice/internal/testutil"
)

// Policies sluice installs read back exactly as the ones iproute2
// installs from the equivalent command the plan prints (the host kernel
// has XFRM policies, not ESP states).
func TestPolicyAddMatchesIproute2(t *testing.T) {
	mine, h := testutil.NewNetNS(t)
	theirs, _ := testutil.NewNetNS(t)
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	for _, tc := range []struct {
		pol xfrm.ESPPolicy
		cmd string
	}{
		{xfrm.ESPPolicy{Dir: xfrm.DirOut, Src: p("192.168.80.1/32"), Dst: p("192.168.80.2/32"), Reqid: 4097},
			"policy add src 192.168.80.1/32 dst 192.168.80.2/32 dir out tmpl proto esp reqid 4097 mode transport"},
		{xfrm.ESPPolicy{Dir: xfrm.DirIn, Src: p("10.1.0.0/24"), Dst: p("10.0.0.0/24"), Priority: 12, Reqid: 7, Tunnel: true, TmplSrc: a("192.0.2.2"), TmplDst: a("192.0.2.1")},
			"policy add src 10.1.0.0/24 dst 10.0.0.0/24 dir in priority 12 tmpl src 192.0.2.2 dst 192.0.2.1 proto esp reqid 7 mode tunnel"},
		{xfrm.ESPPolicy{Dir: xfrm.DirFwd, Src: p("10.1.0.0/24"), Dst: p("10.0.0.0/24"), Priority: 12, Reqid: 7, Tunnel: true, TmplSrc: a("192.0.2.2"), TmplDst: a("192.0.2.1")},
			"policy add src 10.1.0.0/24 dst 10.0.0.0/24 dir fwd priority 12 tmpl src 192.0.2.2 dst 192.0.2.1 proto esp reqid 7 mode tunnel"},
		{xfrm.ESPPolicy{Dir: xfrm.DirOut, Src: p("2001:db8:80::1/128"), Dst: p("2001:db8:80::2/128"), Reqid: 9},
			"policy add src 2001:db8:80::1/128 dst 2001:db8:80::2/128 dir out tmpl proto esp reqid 9 mode transport"},
	} {
		if err := kernel.InNetns(h, func() error { return xfrm.PolicyAdd(tc.pol, false) }); err != nil {
			t.Fatalf("%s: %v", tc.cmd, err)
		}
		testutil.IP(t, theirs, append([]string{"xfrm"}, strings.Fields(tc.cmd)...)...)
	}
	got, want := testutil.IP(t, mine, "xfrm", "policy"), testutil.IP(t, theirs, "xfrm", "policy")
	if got != want {
		t.Fatalf("policies differ from iproute2's:\nsluice:\n%s\niproute2:\n%s", got, want)
	}
	// Update replaces in place; a second add of the same selector fails.
	up := xfrm.ESPPolicy{Dir: xfrm.DirOut, Src: p("192.168.80.1/32"), Dst: p("192.168.80.2/32"), Reqid: 5000}
	if err := kernel.InNetns(h, func() error { return xfrm.PolicyAdd(up, false) }); err == nil {
		t.Fatal("a second add of the same policy succeeded")
	}
	if err := kernel.InNetns(h, func() error { return xfrm.PolicyAdd(up, true) }); err != nil {
		t.Fatal(err)
	}
	if out := testutil.IP(t, mine, "xfrm", "policy", "get", "src", "192.168.80.1/32", "dst", "192.168.80.2/32", "dir", "out"); !strings.Contains(out, "reqid 5000") {
		t.Fatalf("update did not replace the template:\n%s", out)
	}
	if err := kernel.InNetns(h, func() error { return xfrm.PolicyDelete(xfrm.DirOut, up.Src, up.Dst) }); err != nil {
		t.Fatal(err)
	}
	if out := testutil.IP(t, mine, "xfrm", "policy"); strings.Contains(out, "192.168.80.1/32") {
		t.Fatalf("policy still there after delete:\n%s", out)
	}
	// Packet offload on a device without policy offload ops: refused, and
	// the kernel says why. A kernel built without CONFIG_XFRM_OFFLOAD (the
	// host's) ignores the offload attribute and installs a plain policy:
	// which is why apply reads every SA back instead of trusting the ack.
	rel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	offloadBuilt := testutil.KernelConfig(t, strings.TrimSpace(string(rel)))["XFRM_OFFLOAD"] == "y"
	testutil.IP(t, mine, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	err := kernel.InNetns(h, func() error {
		l, err := kernel.Link("v0")
		if err != nil {
			return err
		}
		return xfrm.PolicyAdd(xfrm.ESPPolicy{Dir: xfrm.DirOut, Src: p("10.9.0.1/32"), Dst: p("10.9.0.2/32"), Reqid: 1,
			Offload: &xfrm.Offload{Ifindex: l.Ifindex, Flags: xfrm.OffloadPacket}}, false)
	})
	switch {
	case offloadBuilt && (err == nil || !strings.Contains(err.Error(), "Policy offload is not supported")):
		t.Fatalf("packet offload on a veth: %v", err)
	case !offloadBuilt && err != nil:
		t.Fatalf("without CONFIG_XFRM_OFFLOAD the kernel ignores offload; got %v", err)
	case !offloadBuilt:
		if out := testutil.IP(t, mine, "xfrm", "policy", "get", "src", "10.9.0.1/32", "dst", "10.9.0.2/32", "dir", "out"); strings.Contains(out, "offload") {
			t.Fatalf("a kernel without CONFIG_XFRM_OFFLOAD reports an offloaded policy:\n%s", out)
		}
	}
}
