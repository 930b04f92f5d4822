// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"sluice/internal/config"
	"sluice/internal/kernel/xfrm"
	"sluice/internal/swan"
	"sluice/internal/testutil"
)

// An IKE peer's plan installs its own block policies (even and odd
// marks) before the connection, and a live match leaves nothing to do.
func TestPlanIKEBlockPolicies(t *testing.T) {
	h := ikeHost(t, "none", "", "", 0o600)
	live := bareLive("6.12.95")
	live.IKE = &IKELive{Children: map[string][]swan.OverlayChild{}}
	p, err := NewPlan(h, nil, live)
	if err != nil {
		t.Fatal(err)
	}
	out := planText(p)
	for _, want := range []string{
		"create block policy out 192.168.80.2/32->192.168.80.3/32 mark 0/1",
		"ip xfrm policy add src 192.168.80.2/32 dst 192.168.80.3/32 dir out mark 0x0 mask 0x1 priority 4026531840 action block",
		"ip xfrm policy add src 192.168.80.2/32 dst 192.168.80.3/32 dir out mark 0x1 mask 0x1 priority 4026531840 action block",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	if b, c := strings.Index(out, "block policy"), strings.Index(out, "IKE connection"); !(b >= 0 && b < c) {
		t.Fatalf("block policy at %d, IKE connection at %d:\n%s", b, c, out)
	}
	live.Policies = blockPoliciesLive(h)
	p, err = NewPlan(h, nil, live)
	if err != nil {
		t.Fatal(err)
	}
	if out := planText(p); strings.Contains(out, "block policy") {
		t.Fatalf("block policies in place, yet planned:\n%s", out)
	}
}

// On the kernel: the block policies sit beside a charon-like ESP policy
// with the same selector (different marks make them distinct), the ESP
// policy wins while it exists, and once it is gone the pair's traffic is
// refused, not sent in clear.
func TestIKEBlockPoliciesHoldTraffic(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	testutil.InNewNetns(t, func() {
		for _, args := range [][]string{{"link", "add", "d0", "type", "veth", "peer", "name", "d1"}, {"link", "set", "d0", "up"}, {"link", "set", "d1", "up"}, {"addr", "add", "192.168.80.2/24", "dev", "d0"}} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %v: %v\n%s", args, err, out)
			}
		}
		h := ikeHost(t, "none", "", "", 0o600)
		src, dst := netip.MustParsePrefix("192.168.80.2/32"), netip.MustParsePrefix("192.168.80.3/32")
		charon := xfrm.ESPPolicy{Dir: xfrm.DirOut, Src: src, Dst: dst, Priority: 375423, Reqid: 1}
		if err := xfrm.PolicyAdd(charon, false); err != nil {
			t.Fatal(err)
		}
		for _, b := range ikeBlocks(&h.IPsec.Peers[0]) {
			if err := xfrm.BlockPolicyAdd(b, false); err != nil {
				t.Fatalf("beside charon's policy: %v", err)
			}
		}
		// As the kernel reports them, they are what the plan wants: a
		// second apply plans nothing.
		pols, err := xfrm.DumpPolicies()
		if err != nil {
			t.Fatal(err)
		}
		l := &Live{Policies: pols}
		for _, b := range ikeBlocks(&h.IPsec.Peers[0]) {
			if p := l.liveBlock(b); p == nil || p.Action != xfrm.ActionBlock || p.Priority != b.Priority || len(p.Tmpls) != 0 {
				t.Fatalf("%s as dumped: %+v", b, p)
			}
		}
		if p := l.policy(xfrm.DirOut, src, dst); p == nil || p.Priority != charon.Priority {
			t.Fatalf("charon's policy as the plan finds it: %+v", p)
		}
		send := func() error {
			c, err := net.Dial("udp", "192.168.80.3:4789")
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte("cleartext?"))
			return err
		}
		// With charon's policy and no SA the kernel drops the packet
		// while it waits for an SA (larval drop): the ESP policy wins,
		// not the block.
		if err := send(); errors.Is(err, syscall.EPERM) {
			t.Fatalf("with charon's policy: %v: the block policy won", err)
		}
		if err := xfrm.PolicyDelete(xfrm.DirOut, src, dst); err != nil {
			t.Fatal(err)
		}
		if err := send(); !errors.Is(err, syscall.EPERM) {
			t.Fatalf("charon's policy gone: %v, want EPERM from the block policy", err)
		}
		for _, b := range ikeBlocks(&h.IPsec.Peers[0]) {
			if err := xfrm.BlockPolicyDelete(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := send(); err != nil {
			t.Fatalf("no policy left: %v, want sent", err)
		}
	})
}

// blockPoliciesLive is how the kernel shows h's block policies.
func blockPoliciesLive(h *config.Host) []xfrm.Policy {
	var out []xfrm.Policy
	for i := range h.IPsec.Peers {
		if h.IPsec.Peers[i].Keying != config.KeyingIKE {
			continue
		}
		for _, b := range ikeBlocks(&h.IPsec.Peers[i]) {
			out = append(out, xfrm.Policy{Dir: b.Dir, Priority: b.Priority, Action: xfrm.ActionBlock,
				Sel: xfrm.Selector{Src: b.Src, Dst: b.Dst}, Mark: b.Mark, MarkMask: b.MarkMask})
		}
	}
	return out
}
