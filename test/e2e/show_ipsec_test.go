// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"sluice/internal/testutil"
)

// TestShowIPsecPolicy reads policies the kernel really holds (the host
// kernel installs XFRM policies even without ESP), with filters.
func TestShowIPsecPolicy(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces and XFRM policies")
	bin := sluiceBin(t)
	ns, _ := testutil.NewNetNS(t)
	run(t, "ip", "-n", ns, "xfrm", "policy", "add", "src", "16.0.0.0/8", "dst", "48.0.1.0/24", "dir", "out", "priority", "100",
		"tmpl", "src", "123.0.0.1", "dst", "123.2.0.1", "proto", "esp", "mode", "tunnel", "reqid", "7")
	run(t, "ip", "-n", ns, "xfrm", "policy", "add", "src", "48.0.1.0/24", "dst", "16.0.0.0/8", "dir", "fwd", "priority", "100",
		"tmpl", "src", "123.2.0.1", "dst", "123.0.0.1", "proto", "esp", "mode", "tunnel", "reqid", "7", "level", "use")
	run(t, "ip", "-n", ns, "xfrm", "policy", "add", "src", "10.9.0.0/16", "dst", "10.8.0.0/16", "proto", "tcp", "dport", "443", "dir", "out", "action", "block")

	text := inNS(t, ns, bin, "show", "ipsec", "policy")
	for _, want := range []string{"src 16.0.0.0/8 dst 48.0.1.0/24", "tunnel 123.0.0.1->123.2.0.1 reqid 7", "(optional)", "block", "proto tcp dport 443"} {
		if !strings.Contains(text, want) {
			t.Errorf("show ipsec policy lacks %q:\n%s", want, text)
		}
	}
	var ps []struct {
		Dir      uint8
		Priority uint32
	}
	out := inNS(t, ns, bin, "show", "ipsec", "policy", "--dir", "out", "--addr", "48.0.1.7", "--json")
	if err := json.Unmarshal([]byte(out), &ps); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(ps) != 1 || ps[0].Dir != 1 || ps[0].Priority != 100 {
		t.Fatalf("--dir out --addr 48.0.1.7 selected %+v, want the one OUT policy toward 48.0.1.0/24", ps)
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, bin, "show", "ipsec", "policy", "--dir", "sideways").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "--dir") {
		t.Fatalf("a bad --dir must be refused naming the flag:\n%s", out)
	}
	var st struct {
		XFRM map[string]uint64 `json:"xfrm"`
	}
	out = inNS(t, ns, bin, "show", "ipsec", "stats", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.XFRM) == 0 {
		t.Fatalf("show ipsec stats --json: %v\n%s", err, out)
	}
	if _, ok := st.XFRM["XfrmOutPolBlock"]; !ok {
		t.Fatalf("no XfrmOutPolBlock in %v", st.XFRM)
	}
}
