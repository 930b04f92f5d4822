// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/api"
	"sluice/internal/driverquirk"
	"sluice/internal/testutil"
)

// TestFlowerDaemon runs `sluice gateway run` with the flower tier on (lab:
// software rules) and checks the wiring end to end, once under each mlx5
// profile of the NIC model: the kernel's real SA and OUT policy,
// packet-offloaded on the model's port wan0, mirrored by the daemon.
//
// On both profiles the model's TX SA miss leaves in cleartext (mlx5's
// no-tx-miss-rule), so the daemon first puts no outbound rule into wan0 and
// says why; XDP serves the tunnel, and an SA deleted under a killed daemon
// sends nothing in cleartext. Then gateway.yaml's `accept-leaks:
// [no-tx-miss-rule]`: the daemon says it accepted the leak and the rules go
// on the VLAN child's parent; a port deleted and re-created under its name
// gets the XDP program and its rules again; a killed daemon leaves them
// (hardware rules outlive a process), and an SA deleted under them sends the
// packets they redirect in cleartext, on the wire oracle: the leak the
// operator accepted. `sluice gateway stop` removes them. Under mlx5-6.12 the
// tunnel is per host (sluice's advice for an exact-match driver), and a
// subnet tunnel beside it gets no rule, accept-leaks or not.
func TestFlowerDaemon(t *testing.T) { underEachProfile(t, testFlowerDaemon) }

func testFlowerDaemon(t *testing.T, profile string) {
	l := newLab(t)
	ip := testutil.IPPacket(t)
	exact := driverquirk.ForModel(profile, "").Has(driverquirk.ExactSelectorMatch)
	// The tunnel: a subnet, or per host on an exact-match driver. Without
	// the gateway's own 10.0.0.254 in the source prefix there is no
	// source guard: 3 rules instead of 4.
	src, dst, dstMatch, nRules := "10.0.0.0/24", "48.0.1.0/24", "dst_ip 48.0.1.0/24", 4
	if exact {
		src, dst, dstMatch, nRules = "10.0.0.1/32", "48.0.1.1/32", "dst_ip 48.0.1.1", 3
	}
	flow := testutil.FlowOf("10.0.0.0/24", "48.0.1.0/24")
	gen, dut, sink := l.netns(t), l.netns(t), l.netns(t)
	// genLAN: gen's VLAN 502 host 10.0.0.1, again after lan0 (and so g0)
	// is re-created.
	genLAN := func(t *testing.T) {
		run(t, "ip", "-n", gen, "link", "add", "link", "g0", "name", "g0.502", "type", "vlan", "id", "502")
		run(t, "ip", "-n", gen, "addr", "add", "10.0.0.1/24", "dev", "g0.502")
		run(t, "ip", "-n", gen, "link", "set", "g0.502", "up")
		run(t, "ip", "-n", gen, "route", "add", "48.0.0.0/8", "via", "10.0.0.254")
	}
	veth(t, gen, "g0", "", dut, "lan0", "")
	testutil.NicPair(t, dut, "wan0", sink, "s0")
	oracle := testutil.NicWireOracle(t, sink, "s0")
	run(t, "ip", "-n", dut, "addr", "add", "123.0.0.1/16", "dev", "wan0")
	run(t, "ip", "-n", sink, "addr", "add", "123.0.0.254/16", "dev", "s0")
	run(t, "ip", "-n", dut, "link", "add", "link", "lan0", "name", "lan0.502", "type", "vlan", "id", "502")
	run(t, "ip", "-n", dut, "addr", "add", "10.0.0.254/24", "dev", "lan0.502")
	run(t, "ip", "-n", dut, "link", "set", "lan0.502", "up")
	run(t, "ip", "-n", dut, "route", "add", "48.0.0.0/8", "via", "123.0.0.254")
	run(t, "ip", "-n", dut, "route", "add", "49.0.0.0/8", "via", "123.0.0.254")
	genLAN(t)
	nsRun(t, dut, "sysctl", "-qw", "net.ipv4.ip_forward=1")    // a gateway forwards; rules follow the kernel
	nsRun(t, dut, "ping", "-c", "1", "-W", "3", "123.0.0.254") // resolves the next hop's MAC
	nsRun(t, gen, "ping", "-c", "1", "-W", "3", "10.0.0.254")  // and gen the gateway's
	// The tunnel, as strongSwan installs it with packet offload.
	sa := []string{"xfrm", "state", "add", "src", "123.0.0.1", "dst", "123.0.0.254", "proto", "esp", "spi", "0x1001",
		"reqid", "1", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", labKey, "128", "offload", "packet", "dev", "wan0", "dir", "out"}
	delSA := func(t *testing.T) {
		run(t, ip, "-n", dut, "xfrm", "state", "delete", "src", "123.0.0.1", "dst", "123.0.0.254", "proto", "esp", "spi", "0x1001")
	}
	run(t, ip, append([]string{"-n", dut}, sa...)...)
	run(t, ip, "-n", dut, "xfrm", "policy", "add", "src", src, "dst", dst, "dir", "out", "priority", "100",
		"tmpl", "src", "123.0.0.1", "dst", "123.0.0.254", "proto", "esp", "reqid", "1", "mode", "tunnel", "offload", "packet", "dev", "wan0")
	if exact {
		// A subnet tunnel beside it: the driver would send the rest of
		// 49.0.0.0/16 in cleartext whoever hands it the packets.
		run(t, ip, "-n", dut, "xfrm", "state", "add", "src", "123.0.0.1", "dst", "123.0.0.254", "proto", "esp", "spi", "0x1002",
			"reqid", "2", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", labKey, "128", "offload", "packet", "dev", "wan0", "dir", "out")
		run(t, ip, "-n", dut, "xfrm", "policy", "add", "src", "10.0.0.0/24", "dst", "49.0.0.0/16", "dir", "out", "priority", "100",
			"tmpl", "src", "123.0.0.1", "dst", "123.0.0.254", "proto", "esp", "reqid", "2", "mode", "tunnel", "offload", "packet", "dev", "wan0")
	}

	const config = `lab: true
flower-test-skip-hw: true
interfaces:
  - {name: lan0, l2: fib}
  - {name: lan0.502, l2: fib, flower: outbound}
  - {name: wan0, l2: fib}
`
	rules := func() string { return run(t, "tc", "-n", dut, "filter", "show", "dev", "lan0", "ingress") }
	// skips waits until the daemon's tier has applied and reports its
	// skipped policies' reasons.
	skips := func(t *testing.T, sock string, ok func(reasons string) bool) string {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			var reasons []string
			if st, err := api.NewClient(sock).Gateway(); err == nil && st.Flower != nil {
				for _, s := range st.Flower.Skips {
					reasons = append(reasons, s.Reason)
				}
			}
			if r := strings.Join(reasons, "\n"); ok(r) {
				return r
			} else if time.Now().After(deadline) {
				t.Fatalf("the tier's skips after 60 s:\n%s", r)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// send: 10 datagrams from gen's VLAN host into the tunnel.
	send := func(t *testing.T) testutil.Mark {
		t.Helper()
		m := oracle.Drain(t)
		sendUDP(t, gen, netip.MustParseAddr("48.0.1.1"), 4000, 64, 10)
		return m
	}
	kill := func(g *gateway) {
		g.daemon.Process.Signal(syscall.SIGKILL)
		g.daemon.Wait()
	}

	// The daemons start outside the steps: their bpffs mounts live in the
	// (sub)test's temporary directories until the lab's cleanup.
	safeSock := filepath.Join(t.TempDir(), "api.sock")
	safe := startGateway(t, l, dut, "api-socket: "+safeSock+"\n"+config)
	step(t, "the driver's SA miss sends cleartext: no rule into wan0, and the daemon says why", func(t *testing.T) {
		g, sock := safe, safeSock
		reasons := skips(t, sock, func(r string) bool {
			return strings.Contains(r, "no-tx-miss-rule") && (!exact || strings.Contains(r, "exact-selector-match"))
		})
		t.Logf("skips:\n%s", reasons)
		mustContain(t, g.Log(), "flower: the device's driver would send some redirected packets in cleartext", "no_tx_miss_rule=true")
		if r := rules(); strings.Contains(r, "Egress Redirect") {
			t.Fatalf("a rule redirects into a device whose SA miss leaves in cleartext:\n%s", r)
		}
		m := send(t)
		oracle.NoCleartext(t, m, flow, "the tunnel, served by XDP")
		// Killed, its program stays; the SA deleted under it: XDP asks the
		// kernel for the SA, passes, and the kernel has none to encrypt with.
		kill(g)
		delSA(t)
		before := xfrmOutNoStates(t, dut)
		m = send(t)
		oracle.NoCleartext(t, m, flow, "the SA deleted under a killed daemon's program, no rule")
		if n := xfrmOutNoStates(t, dut) - before; n == 0 {
			t.Fatalf("XfrmOutNoStates did not rise: the datagrams never reached the gateway's kernel, so the check above proves nothing")
		}
		run(t, "ip", "netns", "exec", dut, g.bin, "gateway", "stop", "--pin-dir", g.pinDir)
		run(t, ip, append([]string{"-n", dut}, sa...)...)
	})

	sock := filepath.Join(t.TempDir(), "api.sock")
	g := startGateway(t, l, dut, "api-socket: "+sock+"\naccept-leaks: [no-tx-miss-rule]\n"+config)
	waitRules := func(t *testing.T, what string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		// The forward and its guards (ICMP, TTL, and for the subnet the
		// gateway's own 10.0.0.254 inside the source prefix); guards go in
		// first.
		for strings.Count(rules(), " handle 0x") < nRules || !strings.Contains(rules(), "Egress Redirect to device wan0") ||
			!strings.Contains(run(t, "ip", "-n", dut, "-d", "link", "show", "lan0"), "prog/xdp") {
			if time.Now().After(deadline) {
				t.Fatalf("no program or rules %s after 60 s:\n%s\n%s", what, rules(), run(t, "ip", "-n", dut, "-d", "link", "show", "lan0"))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	step(t, "accept-leaks: [no-tx-miss-rule]: the daemon installs the rule on lan0 for VLAN 502, and says so", func(t *testing.T) {
		waitRules(t, "on lan0")
		want := []string{"vlan_id 502", "skip_hw", dstMatch, "pop", "pedit", "csum"}
		if !exact {
			want = append(want, "src_ip 10.0.0.254")
		}
		mustContain(t, rules(), want...)
		mustContain(t, g.Log(), "flower: accept-leaks names no-tx-miss-rule", "no-tx-miss-rule accepted (accept-leaks)")
		// "(no-tx-miss-rule)" is the row as a reason; the acceptance in
		// the driver's description reads "no-tx-miss-rule accepted".
		reasons := skips(t, sock, func(r string) bool { return !strings.Contains(r, "(no-tx-miss-rule)") })
		if exact {
			// accept-leaks takes no-tx-miss-rule only: a subnet on an
			// exact-match driver leaks through the kernel too.
			mustContain(t, reasons, "exact-selector-match")
			if r := rules(); strings.Contains(r, "49.0.0.0/16") {
				t.Fatalf("a subnet selector got a rule on an exact-match driver:\n%s", r)
			}
		}
		if n := strings.Count(rules(), " handle 0x"); n != nRules {
			t.Fatalf("%d rules, want %d:\n%s", n, nRules, rules())
		}
	})
	step(t, "a port deleted and re-created gets its program and rules again", func(t *testing.T) {
		// A driver reload or a VF re-created: same name, new ifindex,
		// no XDP program and no filters.
		run(t, "ip", "-n", dut, "link", "del", "lan0") // its VLAN child and g0 go with it
		veth(t, gen, "g0", "", dut, "lan0", "")
		run(t, "ip", "-n", dut, "link", "add", "link", "lan0", "name", "lan0.502", "type", "vlan", "id", "502")
		run(t, "ip", "-n", dut, "addr", "add", "10.0.0.254/24", "dev", "lan0.502")
		run(t, "ip", "-n", dut, "link", "set", "lan0.502", "up")
		waitRules(t, "on the re-created lan0")
		genLAN(t)
		nsRun(t, gen, "ping", "-c", "1", "-W", "3", "10.0.0.254")
	})
	step(t, "killed, the daemon leaves its rules: an SA deleted under them leaks, as accepted", func(t *testing.T) {
		kill(g)
		if !strings.Contains(rules(), "Egress Redirect") {
			t.Fatal("a killed daemon cannot have removed its rules; the test is wrong")
		}
		m := send(t)
		oracle.NoCleartext(t, m, flow, "the tunnel through the rule, its SA in place")
		delSA(t)
		m = send(t)
		leaks := oracle.Leaks(t, m, flow)
		t.Logf("%s: %d of 10 datagrams on the wire in cleartext after the SA's deletion under the stale rule", profile, len(leaks))
		if len(leaks) == 0 {
			t.Fatalf("no cleartext under a stale rule into a device whose SA miss leaves in cleartext (%s): the accepted leak did not show, so the rule path was not taken", profile)
		}
	})
	step(t, "gateway stop removes the rules", func(t *testing.T) {
		out := run(t, "ip", "netns", "exec", dut, g.bin, "gateway", "stop", "--pin-dir", g.pinDir)
		mustContain(t, out, "removed "+strconv.Itoa(nRules)+" flower rule(s)")
		if r := rules(); strings.TrimSpace(r) != "" {
			t.Fatalf("filters left after stop:\n%s", r)
		}
	})
}

// xfrmOutNoStates reads the namespace's XfrmOutNoStates: packets the
// kernel's OUT policy selected and found no SA for.
func xfrmOutNoStates(t *testing.T, ns string) uint64 {
	t.Helper()
	for _, line := range strings.Split(nsRun(t, ns, "cat", "/proc/net/xfrm_stat"), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "XfrmOutNoStates" {
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				t.Fatalf("/proc/net/xfrm_stat: %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatal("/proc/net/xfrm_stat has no XfrmOutNoStates")
	return 0
}
