// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"strings"
	"testing"
)

// TestXFRMBlockGuardKernelFacts records what the kernel does with the
// guard docs/flower.md discusses for a killed daemon's rules: a block
// policy under each tunnel's allow policy, so that cleartext no allow
// policy claims is dropped. A block policy with the same selector, mark,
// if_id, type and direction cannot coexist with the allow policy
// (xfrm_policy_insert: add says EEXIST whatever the priority, update
// replaces the allow policy). A distinct mark key (0/0xffffffff: unmarked
// packets only) coexists, loses to the allow policy while that exists and
// blocks once it is deleted. What a flower rule's mirred redirect does
// with it is another matter: the redirect never meets the XFRM output
// path in software (checked here too), so only a NIC's packet-offloaded
// block policy could drop the rule's cleartext.
func TestXFRMBlockGuardKernelFacts(t *testing.T) {
	l := newLab(t)
	ns := l.netns(t)
	peer := l.netns(t)
	veth(t, ns, "v0", "10.0.0.1/24", peer, "v1", "10.0.0.2/24")
	run(t, "ip", "-n", ns, "route", "add", "48.0.0.0/16", "via", "10.0.0.2")
	const sel = "src 10.0.0.0/24 dst 48.0.0.0/16 dir out"
	xp := func(verb, rest string) (string, error) {
		return try("ip", append([]string{"-n", ns, "xfrm", "policy", verb}, strings.Fields(sel+" "+rest)...)...)
	}
	blocked := func() string {
		for _, l := range strings.Split(nsRun(t, ns, "cat", "/proc/net/xfrm_stat"), "\n") {
			if strings.HasPrefix(l, "XfrmOutPolBlock") {
				return strings.Join(strings.Fields(l)[1:], "")
			}
		}
		return "?"
	}
	send := func() { try("ip", "netns", "exec", ns, "ping", "-c", "1", "-W", "1", "-I", "10.0.0.1", "48.0.0.1") }
	step(t, "same key: a block policy cannot sit under the allow policy", func(t *testing.T) {
		if _, err := xp("add", "priority 100 action allow"); err != nil {
			t.Fatal(err)
		}
		out, err := xp("add", "priority 200 action block")
		if err == nil || !strings.Contains(out, "File exists") {
			t.Fatalf("a same-key block policy at a lower priority was accepted beside the allow policy: %q %v", out, err)
		}
		if _, err := xp("update", "priority 200 action block"); err != nil {
			t.Fatal(err)
		}
		if out := run(t, "ip", "-n", ns, "xfrm", "policy"); strings.Contains(out, "priority 100") || strings.Count(out, "dir out") != 1 {
			t.Fatalf("update did not replace the allow policy:\n%s", out)
		}
		run(t, "ip", "-n", ns, "xfrm", "policy", "flush")
	})
	step(t, "mark 0/0xffffffff: the block coexists, loses to allow, blocks once allow is gone", func(t *testing.T) {
		if _, err := xp("add", "priority 100 action allow"); err != nil {
			t.Fatal(err)
		}
		if out, err := xp("add", "priority 200 mark 0 mask 0xffffffff action block"); err != nil {
			t.Fatalf("%s %v", out, err)
		}
		b0 := blocked()
		send()
		if b := blocked(); b != b0 {
			t.Fatalf("the guard won over the allow policy (XfrmOutPolBlock %s -> %s)", b0, b)
		}
		if _, err := xp("delete", ""); err != nil {
			t.Fatal(err)
		}
		send()
		if b := blocked(); b == b0 {
			t.Fatalf("with the allow policy gone the guard did not block (XfrmOutPolBlock %s)", b)
		}
	})
	step(t, "a flower mirred redirect bypasses the XFRM output path", func(t *testing.T) {
		// The guard still blocks 10.0.0.0/24 -> 48.0.0.0/16 for the stack.
		// The peer sends such packets to ns; a flower rule on v0's ingress
		// redirects them back out of v0, and the peer counts them.
		run(t, "tc", "-n", ns, "qdisc", "add", "dev", "v0", "clsact")
		run(t, "tc", "-n", ns, "filter", "add", "dev", "v0", "ingress", "protocol", "ip", "pref", "1", "flower", "skip_hw",
			"dst_ip", "48.0.0.1", "action", "mirred", "egress", "redirect", "dev", "v0")
		run(t, "tc", "-n", peer, "qdisc", "add", "dev", "v1", "clsact")
		run(t, "tc", "-n", peer, "filter", "add", "dev", "v1", "ingress", "protocol", "ip", "pref", "1", "flower", "skip_hw",
			"dst_ip", "48.0.0.1", "action", "drop")
		b0 := blocked()
		run(t, "ip", "-n", peer, "route", "add", "48.0.0.0/16", "via", "10.0.0.1")
		try("ip", "netns", "exec", peer, "ping", "-c", "2", "-W", "1", "-I", "10.0.0.2", "48.0.0.1")
		out := run(t, "tc", "-n", peer, "-s", "filter", "show", "dev", "v1", "ingress")
		if !strings.Contains(out, "Sent") || strings.Contains(out, "Sent 0 bytes") {
			t.Fatalf("the redirected packets did not come back out of v0:\n%s", out)
		}
		if b := blocked(); b != b0 {
			t.Fatalf("the XFRM block policy saw the redirected packets (XfrmOutPolBlock %s -> %s)", b0, b)
		}
	})
}
