// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

// A charon restart under a live IKE overlay: charon removes its policies
// when it stops, and sluice's own block policies (internal/overlay
// plan_ike_block.go) hold the pair's traffic until charon is back and the
// next apply has brought the pair up again. The wire is captured through
// the whole restart: ESP only, not one cleartext frame of the pair.

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/swan"
)

func TestOverlayIKEBlockThroughCharonRestart(t *testing.T) {
	start := time.Now()
	l := newLab(t)
	dir := t.TempDir()
	a := ovHost{ns: l.netns(t), name: "ike-a"}
	b := ovHost{ns: l.netns(t), name: "ike-b"}
	sw := l.netns(t)
	run(t, "ip", "-n", sw, "link", "add", "br0", "type", "bridge")
	run(t, "ip", "-n", sw, "link", "set", "br0", "up")
	for _, h := range []struct{ ns, side string }{{a.ns, "a"}, {b.ns, "b"}} {
		for _, i := range []string{"0", "1"} {
			veth(t, h.ns, "p"+i, "", sw, h.side+i, "")
			run(t, "ip", "-n", sw, "link", "set", h.side+i, "mtu", "9000")
			run(t, "ip", "-n", sw, "link", "set", h.side+i, "master", "br0")
		}
	}
	var ch [2]*swan.Charon
	for i, ns := range []string{a.ns, b.ns} {
		c, err := swan.StartCharon(swan.CharonOptions{Dir: l.owner.TempDir(), NetNS: ns})
		if err != nil {
			t.Fatal(err)
		}
		ch[i] = c
		l.owner.Cleanup(func() {
			if l.owner.Failed() {
				l.owner.Logf("charon %d:\n%s", i, ch[i].LogTail(60))
			}
			ch[i].Stop()
		})
	}
	ovWrite(t, filepath.Join(dir, "ike.psk"), "0x5ec1e75ec1e75ec1e75ec1e75ec1e7aa5ec1e75ec1e75ec1e75ec1e75ec1e7aa\n", 0o600)
	a.file, b.file = filepath.Join(dir, "ike-a.yaml"), filepath.Join(dir, "ike-b.yaml")
	ovWrite(t, a.file, ikeVXLANHost("ike-a", ch[0].URI, 1, 2), 0o644)
	ovWrite(t, b.file, ikeVXLANHost("ike-b", ch[1].URI, 2, 1), 0o644)

	out := ovMust(t, a.ns, "apply", "-f", a.file)
	mustContain(t, out, "block policy out 192.168.80.1/32->192.168.80.2/32 mark 0/1")
	ovMust(t, b.ns, "apply", "-f", b.file)
	waitIKE(t, a)
	nsRun(t, a.ns, "ping", "-c", "2", "-i", "0.2", "-W", "3", "192.168.90.2")
	if pol := run(t, "ip", "-n", a.ns, "xfrm", "policy"); strings.Count(pol, "action block") != 2 {
		t.Fatalf("want sluice's 2 block policies beside charon's:\n%s", pol)
	}

	// ESP only from here: through the stop, traffic while charon is
	// down, the restart, the agent's next apply and traffic again.
	wireOnlyESP(t, sw, func() {
		ch[0].Stop()
		if pol := run(t, "ip", "-n", a.ns, "xfrm", "policy"); strings.Contains(pol, "proto esp") {
			t.Errorf("charon stopped, yet an ESP policy is left (the test would prove nothing):\n%s", pol)
		}
		// Fails (the block drops it): what matters is the wire.
		_, _ = try("ip", "netns", "exec", a.ns, "ping", "-c", "3", "-i", "0.2", "-W", "1", "192.168.90.2")
		c, err := swan.StartCharon(ch[0].Opts)
		if err != nil {
			t.Fatal(err)
		}
		ch[0] = c
		ovMust(t, a.ns, "apply", "-f", a.file)
		waitIKE(t, a)
		nsRun(t, a.ns, "ping", "-c", "6", "-i", "0.2", "-W", "3", "192.168.90.2")
	})

	for _, h := range []ovHost{a, b} {
		ovMust(t, h.ns, "teardown", "-f", h.file)
	}
	if pol := run(t, "ip", "-n", a.ns, "xfrm", "policy"); strings.Contains(pol, "action block") {
		t.Fatalf("teardown left a block policy:\n%s", pol)
	}
	t.Logf("charon restart under block policies: %.1f s", time.Since(start).Seconds())
}
