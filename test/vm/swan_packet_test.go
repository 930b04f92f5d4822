// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/internal/bench"
	"sluice/internal/swan"
	"sluice/internal/testutil"
)

// needCharon6 skips unless the guest's strongSwan takes hw_offload =
// packet: 6.x, which only the next kernel's trixie root has (6.1 from sid,
// docs/testing.md "The next kernel"); the host's bookworm has 5.9.8, which
// refuses it (internal/swan's TestPacketOffloadNeedsNewerCharon).
func needCharon6(t *testing.T) string {
	t.Helper()
	// The package's version: swanctl --version wants a running charon on 6.x.
	v := strings.TrimSpace(run(t, "dpkg-query", "-W", "-f=${Version}", "strongswan-charon"))
	major, err := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	if err != nil {
		t.Fatalf("strongswan-charon's version %q", v)
	}
	if major < 6 {
		t.Skipf("strongSwan %s refuses hw_offload = packet: run on the next kernel (SLUICE_VM_KERNEL=next), whose root has strongSwan 6", v)
	}
	return v
}

// swanRekeys is the CHILD_SA rekeys under traffic: 10 in the suite,
// SLUICE_REKEYS for the 100.
func swanRekeys() int {
	if n, err := strconv.Atoi(os.Getenv("SLUICE_REKEYS")); err == nil && n > 0 {
		return n
	}
	return 10
}

var xfrmOffloadRe = regexp.MustCompile(`crypto offload parameters: dev (\S+) dir (in|out) mode packet`)

// TestSwanPacketOffloadOnModel is the production stack of issue 32 end to
// end: strongSwan 6 with hw_offload = packet on gw0, whose WAN port is a
// NIC model port. `sluice swan gen --apply` and `sluice swan up` bring the
// tunnels up; charon installs packet-offloaded SAs and IN/OUT policies on
// the port (the FWD ones stay the kernel's); `sluice gateway` mirrors them
// and XDP redirects the LAN's packets into the port, where the model
// encrypts; gw1 (software ESP) decrypts. Then CHILD_SA rekeys under a
// sequence-numbered UDP stream (internal/bench's rekey bench): no datagram
// lost, and no cleartext frame of the tunnel's traffic on the wire, counted
// on captures of both ports' taps (testutil's wire oracle), never by the
// model's counters. The model runs mlx5-upstream, whatever
// SLUICE_NICMODEL_PROFILE says: the test runs only on the next kernel
// (7.3), and that is its mlx5 (the subnet fix is in since 6.15); under
// the default mlx5-6.12, a driver 7.3 does not carry, swan gen's subnet
// selectors would leak through the kernel's own path too.
//
//	lan0 16.0.0.1 -- p1 [gw0: charon 6 packet offload, sluice XDP] p0 123.0.0.1 ==model wire== q0 123.0.0.2.. [gw1: charon, esp4] p1 -- lan1 48.0.0.1
func TestSwanPacketOffloadOnModel(t *testing.T) {
	version := needCharon6(t)
	l := newLab(t)
	testutil.UseNicmodelProfile(t, testutil.ProfileMlx5Upstream) // 7.3's mlx5 (above)
	bin := sluiceBin(t)
	const n = 2 // tunnels; tunnel 1 carries the traffic, tunnel 2 is its neighbour
	lan0, gw0, gw1, lan1 := l.netns(t), l.netns(t), l.netns(t), l.netns(t)
	veth(t, lan0, "l0", "10.0.0.1/24", gw0, "p1", "")
	veth(t, gw1, "p1", "", lan1, "l1", "11.0.0.1/24")
	l.nicPairNamed(t, gw0, "p0", gw1, "q0")
	for _, e := range [][2]string{{gw0, "p0"}, {gw1, "q0"}} {
		nsRun(t, e[0], "sysctl", "-qw", "net.ipv6.conf."+e[1]+".disable_ipv6=1")
	}
	run(t, "ip", "-n", lan0, "addr", "add", "16.0.0.1/32", "dev", "lo")
	run(t, "ip", "-n", lan0, "route", "add", "default", "via", "10.0.0.254", "src", "16.0.0.1")
	run(t, "ip", "-n", lan1, "addr", "add", "48.0.0.1/32", "dev", "lo")
	run(t, "ip", "-n", lan1, "route", "add", "default", "via", "11.0.0.254", "src", "48.0.0.1")
	// lan0's replies come back through gw0's p1: GRO (NAPI) takes frames
	// XDP redirects out of p1 into the veth.
	nsRun(t, lan0, "ethtool", "-K", "l0", "gro", "on")
	// A veth sends with the UDP checksum left to a NIC that never computes
	// it (CHECKSUM_PARTIAL): the kernel's forwarding fills it in, XDP
	// forwards the frame as it is, and lan1 dropped 1690 of 2000 datagrams
	// as UdpInCsumErrors. A host's NIC puts whole checksums on the wire.
	nsRun(t, lan0, "ethtool", "-K", "l0", "tx", "off")

	dir0, dir1 := t.TempDir(), t.TempDir()
	step(t, "sluice swan gen --apply: gw0 with hw_offload = packet, gw1 in software", func(t *testing.T) {
		gen := []string{"swan", "gen", "--topology", "test0", "--tunnels", strconv.Itoa(n), "--apply"}
		run(t, bin, append(gen, "--role", "gw0", "--netns", gw0, "-o", dir0, "--hw-offload", "packet")...)
		run(t, bin, append(gen, "--role", "gw1", "--netns", gw1, "-o", dir1, "--hw-offload", "no", "--p0-dev", "q0",
			"--psk-file", filepath.Join(dir0, swan.PSKFile))...)
		conf := run(t, "cat", filepath.Join(dir0, swan.ConfFile))
		if strings.Count(conf, "hw_offload = packet") != n {
			t.Fatalf("gw0's swanctl.conf has no hw_offload = packet per tunnel:\n%s", conf)
		}
	})
	step(t, "the model wire carries gw0's and gw1's packets", func(t *testing.T) {
		// Permanent neighbours, as the model's other tests have: XDP's FIB
		// lookups need resolved ones (else they pass packets to the kernel).
		for i := 1; i <= n; i++ {
			run(t, "ip", "-n", gw0, "neigh", "replace", fmt.Sprintf("123.0.0.%d", i+1), "lladdr", macOf(t, gw1, "q0"), "dev", "p0", "nud", "permanent")
		}
		run(t, "ip", "-n", gw1, "neigh", "replace", "123.0.0.1", "lladdr", macOf(t, gw0, "p0"), "dev", "q0", "nud", "permanent")
		run(t, "ip", "-n", gw0, "neigh", "replace", "10.0.0.1", "lladdr", macOf(t, lan0, "l0"), "dev", "p1", "nud", "permanent")
		// The plan's default route is the seed's dummy0 (policies decide
		// for the kernel); XDP forwards a packet only where a route gives
		// it a next hop, so each tunnel's /24 is routed to its carrier on
		// the offload port, as a gateway that offloads would route it.
		for i := 1; i <= n; i++ {
			run(t, "ip", "-n", gw0, "route", "replace", swan.RemoteNet(0, i).String(), "via", fmt.Sprintf("123.0.0.%d", i+1), "dev", "p0")
		}
		if out, err := try("ip", "netns", "exec", gw0, "ping", "-c", "2", "-W", "3", "123.0.0.2"); err != nil {
			t.Fatalf("gw0 -> gw1 over the model wire: %v\n%s\ngw0: %s\n%v\ngw1: %s\n%v", err, out,
				run(t, "ip", "-n", gw0, "-br", "addr"), ethStats(t, gw0, "p0"), run(t, "ip", "-n", gw1, "-br", "addr"), ethStats(t, gw1, "q0"))
		}
	})
	var ch [2]*swan.Charon
	step(t, "two charons "+version+" start, each in its own netns and VICI socket", func(t *testing.T) {
		for i, ns := range []string{gw0, gw1} {
			c, err := swan.StartCharon(swan.CharonOptions{Dir: l.owner.TempDir(), NetNS: ns})
			if err != nil {
				t.Fatal(err)
			}
			ch[i] = c
			l.owner.Cleanup(func() {
				c.Stop()
				if l.owner.Failed() {
					l.owner.Logf("gw%d charon:\n%s", i, c.LogTail(60))
				}
			})
		}
	})
	g := startGateway(t, l, gw0, "interfaces:\n  - {name: p1, l2: fib}\n"+
		"  - {name: p0, l2: fib, inbound: forward, wan-antispoof: upstream}\n")
	// Each direction's wire is captured on the receiving port's tap, as it
	// came off the wire. IKE crosses in clear (UDP 500), so the leak count
	// is per inner flow: the LAN's traffic out, the replies in.
	out0, in0 := testutil.FlowOf("16.0.0.0/8", "48.0.0.0/8"), testutil.FlowOf("48.0.0.0/8", "16.0.0.0/8")
	oracleOut, oracleIn := testutil.NicWireOracle(t, gw1, "q0"), testutil.NicWireOracle(t, gw0, "p0")

	spec := &swan.Spec{Topology: swan.TopologyTest0, Role: swan.RoleGW0, Tunnels: n}
	spec.Normalize()
	tn := spec.Tunnel(0, 1)
	step(t, "sluice swan up: the tunnels come up, charon offloads their SAs and policies to p0", func(t *testing.T) {
		run(t, bin, "swan", "up", "--dir", dir1, "--uri", ch[1].URI)
		out, err := try(bin, "swan", "up", "--dir", dir0, "--uri", ch[0].URI, "--json")
		if err != nil {
			t.Fatalf("gw0 up: %v\n%s\ngw0 p0 %v\ngw1 q0 %v\ngw0 neigh:\n%s", err, out, ethStats(t, gw0, "p0"), ethStats(t, gw1, "q0"),
				run(t, "ip", "-n", gw0, "neigh"))
		}
		var res swan.UpResult
		if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &res); err != nil {
			t.Fatalf("up --json: %v\n%s", err, out)
		}
		if res.Established != n || res.Failed != 0 {
			t.Fatalf("gw0 up: %+v", res)
		}
		// Every ESP SA on gw0 is packet-offloaded to p0, in and out.
		st := run(t, "ip", "-n", gw0, "xfrm", "state")
		dirs := map[string]int{}
		for _, m := range xfrmOffloadRe.FindAllStringSubmatch(st, -1) {
			if m[1] != "p0" {
				t.Errorf("an SA is offloaded to %s, want p0", m[1])
			}
			dirs[m[2]]++
		}
		if dirs["in"] != n || dirs["out"] != n || strings.Count(st, "proto esp") != 2*n {
			t.Fatalf("gw0's SAs: %v packet-offloaded of %d, want %d in and %d out:\n%s", dirs, strings.Count(st, "proto esp"), n, n, st)
		}
		// The IN and OUT policies are offloaded; FWD never (mlx5 refuses
		// them, strongSwan does not ask).
		// charon 6 also offloads its IKE port bypass policies (UDP 500
		// and 4500, in and out, both families: 8, without a template).
		pol := run(t, "ip", "-n", gw0, "xfrm", "policy")
		tunnel, bypass := offloadedPolicies(pol, "p0")
		if tunnel != 2*n || bypass != 8 {
			t.Fatalf("gw0 has %d packet-offloaded tunnel policies and %d bypass ones, want %d (IN and OUT per tunnel) and 8:\n%s", tunnel, bypass, 2*n, pol)
		}
		if c := ethStats(t, gw0, "p0")["ipsec_sa_count"]; c != 2*n {
			t.Errorf("the model holds %d SAs, want %d", c, 2*n)
		}
	})
	step(t, "the gateway mirrors charon's offloaded policy: XDP forwards tunnel 1", func(t *testing.T) {
		g.explainUntil(t, func(out string) bool { return strings.Contains(out, "forward-out") },
			"--iface", "p1", "src", "16.0.0.1", "dst", "48.0.0.1", "proto", "udp", "dport", "9999")
	})
	step(t, "XDP forwards, the model encrypts, gw1 decrypts; the wire is ESP only", func(t *testing.T) {
		s0, mo, mi := ethStats(t, gw0, "p0"), oracleOut.Drain(t), oracleIn.Drain(t)
		if out, err := try("ip", "netns", "exec", lan0, "ping", "-c", "10", "-i", "0.2", "-W", "3", "48.0.0.1"); err != nil {
			t.Fatalf("ping through the tunnel: %v\n%s\ngw0 p0: %v", err, out, ethStats(t, gw0, "p0"))
		}
		d := statDelta(s0, ethStats(t, gw0, "p0"), "xdp_xmit", "tx_ipsec_packets", "rx_ipsec_packets")
		if d["xdp_xmit"] < 1 || d["tx_ipsec_packets"] < 10 || d["rx_ipsec_packets"] < 10 {
			t.Errorf("gw0's model port: %v, want frames from XDP, >= 10 encrypted, >= 10 replies decrypted", d)
		}
		t.Logf("gw0 p0: %v", d)
		oracleOut.NoCleartext(t, mo, out0, "pings out through XDP and the model")
		oracleIn.NoCleartext(t, mi, in0, "replies from gw1")
		// ESP frames carry the outer addresses: gw0 to tunnel 1's carrier.
		if c := testutil.Tally(oracleOut.Frames(t, mo), testutil.FlowOf("123.0.0.1", tn.RemoteAddr.String())); c[testutil.ESP] < 10 {
			t.Errorf("the wire to gw1 carried %s from gw0 to %s, want >= 10 ESP", c, tn.RemoteAddr)
		}
	})
	step(t, fmt.Sprintf("%d CHILD_SA rekeys under traffic: 0 lost, 0 cleartext on the wire", swanRekeys()), func(t *testing.T) {
		rekeysUnderTraffic(t, lan0, lan1, gw0, ch, tn, n, oracleOut, oracleIn, out0, in0, g)
	})
	step(t, "sluice swan down: the SAs leave the model, the mirror empties", func(t *testing.T) {
		run(t, bin, "swan", "down", "--dir", dir0, "--uri", ch[0].URI)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			c := ethStats(t, gw0, "p0")["ipsec_sa_count"]
			if c == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the model holds %d SAs 10 s after down, want 0:\n%s", c, run(t, "ip", "-n", gw0, "xfrm", "state"))
			}
		}
		g.explainUntil(t, func(out string) bool { return strings.Contains(out, "no-policy") },
			"--iface", "p1", "src", "16.0.0.1", "dst", "48.0.0.1", "proto", "udp", "dport", "9999")
	})
}

// offloadedPolicies counts the policies `ip xfrm policy` shows
// packet-offloaded to dev: those with a template (the tunnels') and those
// without (bypass).
func offloadedPolicies(out, dev string) (tunnel, bypass int) {
	for _, block := range strings.Split("\n"+out, "\nsrc ")[1:] {
		if !strings.Contains(block, "crypto offload parameters: dev "+dev+" mode packet") {
			continue
		}
		if strings.Contains(block, "\ttmpl ") {
			tunnel++
		} else {
			bypass++
		}
	}
	return tunnel, bypass
}

// rekeysUnderTraffic runs internal/bench's rekey bench from lan0 to lan1
// across tunnel tn while gw0's charon rekeys its CHILD_SA, then checks the
// datagrams (none lost), the wire (no cleartext of the flow either way, and
// a new outbound SPI per rekey seen on it), the model (old SAs gone) and
// the fast path (XDP still forwarding, through the new SAs).
func rekeysUnderTraffic(t *testing.T, lan0, lan1, gw0 string, ch [2]*swan.Charon, tn swan.Tunnel, tunnels int,
	oracleOut, oracleIn *testutil.WireOracle, out0, in0 testutil.Flow, g *gateway) {
	rekeys := swanRekeys()
	s0, mo, mi := ethStats(t, gw0, "p0"), oracleOut.Drain(t), oracleIn.Drain(t)
	start := time.Now()
	r, err := bench.RunRekey(context.Background(), bench.RekeyOptions{
		NSA: lan0, NSB: lan1, To: netip.MustParseAddr("48.0.0.1"),
		// Child mode rekeys by CHILD_SA name (swan.Client.RekeyChild).
		ViciA: ch[0].URI, ViciB: ch[1].URI, ConnA: tn.Child, ConnB: tn.Child,
		Rekeys: rekeys, Interval: 2 * time.Second, Rate: 100, Mode: bench.RekeyChild,
		Label: "charon packet offload on the model",
	})
	if err != nil {
		t.Fatalf("rekey bench: %v", err)
	}
	t.Logf("%d rekeys in %.0f s (%s, kernel %s): sent %d, received %d, lost %d, duplicated %d, reordered %d; achieved %.0f pps",
		len(r.Events), time.Since(start).Seconds(), r.Charon, r.Kernel, r.Total.Sent, r.Total.Received, r.Total.Lost,
		r.Total.Duplicated, r.Total.Reordered, r.AchievedRate)
	for _, e := range r.Events {
		if e.Error != "" {
			t.Errorf("rekey %d: %s", e.N, e.Error)
		}
		if e.Lost != 0 {
			t.Errorf("rekey %d lost %d datagram(s) (longest gap %.0f ms): %s; counters %v", e.N, e.Lost, e.LongestGapMS, e.Cause, e.Drops)
		}
	}
	if len(r.Events) != rekeys || r.Total.Sent == 0 || r.Total.Lost != 0 {
		t.Errorf("rekey bench: %d rekeys of %d, sent %d, lost %d", len(r.Events), rekeys, r.Total.Sent, r.Total.Lost)
	}
	oracleOut.NoCleartext(t, mo, out0, "the stream out during the rekeys")
	oracleIn.NoCleartext(t, mi, in0, "the replies during the rekeys")
	// Every rekey put a new outbound SA on the wire: the stream's ESP
	// frames to gw1 carry at least rekeys+1 SPIs.
	spis := map[uint32]int{}
	for _, f := range oracleOut.Frames(t, mo) {
		if f.Class == testutil.ESP && f.Dst == tn.RemoteAddr {
			spis[f.SPI]++
		}
	}
	if len(spis) < rekeys+1 {
		t.Errorf("the wire to %s carried %d outbound SPIs, want >= %d (one per rekey and the first): %v", tn.RemoteAddr, len(spis), rekeys+1, spis)
	}
	d := statDelta(s0, ethStats(t, gw0, "p0"), "xdp_xmit", "tx_ipsec_packets", "tx_ipsec_drop_no_state", "tx_cleartext_packets")
	t.Logf("gw0 p0 during the rekeys: %v; %d outbound SPIs on the wire", d, len(spis))
	if d["xdp_xmit"] == 0 {
		t.Errorf("XDP forwarded nothing during the rekeys: %v", d)
	}
	// The old SAs leave the model: one in and one out per tunnel again
	// (charon keeps a rekeyed inbound SA delete_rekeyed_delay, 5 s).
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		c := ethStats(t, gw0, "p0")["ipsec_sa_count"]
		if c == uint64(2*tunnels) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the model holds %d SAs 20 s after the rekeys, want %d (in and out per tunnel)", c, 2*tunnels)
			break
		}
	}
	g.explainUntil(t, func(out string) bool { return strings.Contains(out, "forward-out") },
		"--iface", "p1", "src", "16.0.0.1", "dst", "48.0.0.1", "proto", "udp", "dport", "9999")
	s1 := ethStats(t, gw0, "p0")
	if out, err := try("ip", "netns", "exec", lan0, "ping", "-c", "5", "-i", "0.2", "-W", "3", "48.0.0.1"); err != nil {
		t.Fatalf("ping after the rekeys: %v\n%s", err, out)
	}
	if d := statDelta(s1, ethStats(t, gw0, "p0"), "xdp_xmit"); d["xdp_xmit"] == 0 {
		t.Errorf("after the rekeys XDP forwards nothing through the new SAs")
	}
}
