// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

// The overlay keyed by IKE with packet offload (issue 32: "the overlay's
// keying: ike with offload: packet on the model, through apply and verify
// --traffic"): `sluice apply` loads the connection into charon 6 with
// hw_offload = packet, charon installs the CHILD_SA's SAs and its IN and
// OUT policies packet-offloaded to host A's NIC model port, `sluice verify`
// reports them, and rekeys of the CHILD_SA and of the IKE_SA under a
// sequence-numbered stream lose nothing and put no cleartext on the wire,
// counted on captures of both ports' taps (testutil's wire oracle). Host B
// keys in software over its own model port. strongSwan offloads an SA to
// the port holding its local address, so the tunnel's endpoints are the
// ports' addresses.
//
// Two kinds of traffic: a LAN behind each host (tunnel-mode selectors
// between the LANs, the hosts forward), and the overlay's own Geneve VTEPs
// (the selectors are the VTEP addresses on lo). The second is what the
// overlay is for; it needs the NIC model to build the frames that the
// kernel hands a packet-offloaded port in tunnel mode without an Ethernet
// header (xfrm_dev_direct_output only pushes room for one; forwarded
// packets keep the one they came with), as mlx5 does
// (kmod/nicmodel/neigh.c).
//
//	lanA 10.1.0.1 -- A (192.168.81.1 on lo) a0 192.168.70.1 ==model wire== b0 192.168.70.2 B (192.168.81.2) -- lanB 10.2.0.1

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/bench"
	"sluice/internal/swan"
	"sluice/internal/testutil"
)

// ikeSiteHost is one host's file: one model port with the tunnel's
// address and one IKE peer in tunnel mode between a host on each LAN;
// offload names the peer's offload lines ("" for software). Host
// selectors: with a subnet, verify --traffic probes it from this host
// (verify_probe.go), which is the host's own tunnel-mode traffic
// (TestOverlayIKEPacketOffloadVTEPOnModel covers that).
func ikeSiteHost(name, uri, port string, me, other int, offload string) string {
	return fmt.Sprintf(`name: %s
uplinks:
  ports: [%s]
  addresses: [192.168.70.%d/24]
ipsec:
  keying: ike
  ike: {vici: "%s", psk: ike.psk, rekey-time: 1h}
  peers:
    - name: peer
      local: 192.168.70.%d
      remote: 192.168.70.%d
      mode: tunnel
      selectors: [{local: 10.%d.0.1/32, remote: 10.%d.0.1/32}]
      esn: true
%s`, name, port, me, uri, me, other, me, other, offload)
}

// ikeVTEPHost is ikeSiteHost with a Geneve VTEP whose addresses (on lo)
// are the tunnel's selectors.
func ikeVTEPHost(name, uri, port string, me, other int, offload string) string {
	return fmt.Sprintf(`name: %s
uplinks:
  ports: [%s]
  addresses: [192.168.70.%d/24]
vteps:
  - name: gnv0
    type: geneve
    vni: 78
    local: 192.168.81.%d
    remotes: [{address: 192.168.81.%d, via: 192.168.70.%d}]
    addresses: [192.168.91.%d/24]
ipsec:
  keying: ike
  ike: {vici: "%s", psk: ike.psk, rekey-time: 1h}
  peers:
    - name: peer
      local: 192.168.70.%d
      remote: 192.168.70.%d
      mode: tunnel
      selectors: [{local: 192.168.81.%d/32, remote: 192.168.81.%d/32}]
      esn: true
%s`, name, port, me, me, other, other, me, uri, me, other, me, other, offload)
}

// ikpLab is the two hosts: namespaces, model ports a0 and b0 with a wire
// oracle on each (each direction as it came off the wire), a charon each,
// the PSK and the host files.
type ikpLab struct {
	a, b                ovHost
	ch                  [2]*swan.Charon
	oracleOut, oracleIn *testutil.WireOracle
}

func newIKPLab(t *testing.T, l *lab, file func(name, uri, port string, me, other int, offload string) string) *ikpLab {
	t.Helper()
	dir := t.TempDir()
	k := &ikpLab{
		a: ovHost{ns: l.netns(t), name: "ikp-a", file: filepath.Join(dir, "ikp-a.yaml")},
		b: ovHost{ns: l.netns(t), name: "ikp-b", file: filepath.Join(dir, "ikp-b.yaml")},
	}
	for _, ns := range []string{k.a.ns, k.b.ns} {
		// No IPv6 control traffic on the wire: every IP frame counted is the tunnel's or IKE's.
		nsRun(t, ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
	l.nicPairNamed(t, k.a.ns, "a0", k.b.ns, "b0")
	k.oracleOut, k.oracleIn = testutil.NicWireOracle(t, k.b.ns, "b0"), testutil.NicWireOracle(t, k.a.ns, "a0")
	for i, ns := range []string{k.a.ns, k.b.ns} {
		c, err := swan.StartCharon(swan.CharonOptions{Dir: l.owner.TempDir(), NetNS: ns})
		if err != nil {
			t.Fatal(err)
		}
		k.ch[i] = c
		l.owner.Cleanup(func() {
			if l.owner.Failed() {
				l.owner.Logf("charon %d:\n%s", i, c.LogTail(60))
			}
			c.Stop()
		})
	}
	ovWrite(t, filepath.Join(dir, "ike.psk"), "0x6ec1e75ec1e75ec1e75ec1e75ec1e7aa5ec1e75ec1e75ec1e75ec1e75ec1e7bb\n", 0o600)
	ovWrite(t, k.a.file, file(k.a.name, k.ch[0].URI, "a0", 1, 2, "      offload: packet\n      offload-dev: a0\n"), 0o644)
	ovWrite(t, k.b.file, file(k.b.name, k.ch[1].URI, "b0", 2, 1, ""), 0o644)
	return k
}

// apply applies B's file, then A's (B's address must answer A's IKE),
// waits for the CHILD_SA and checks what charon offloaded.
func (k *ikpLab) apply(t *testing.T) {
	t.Helper()
	t.Logf("B:\n%s", ovMust(t, k.b.ns, "apply", "-f", k.b.file))
	t.Logf("A:\n%s", ovMust(t, k.a.ns, "apply", "-f", k.a.file))
	waitIKE(t, k.a)
	checkIKEPacketOffload(t, k.a.ns, "a0")
}

// noStrayFrames fails for frames on the wire after the marks that are
// neither IP nor link control: a frame a port sent with an Ethernet header
// nobody wrote carries its payload in clear where no IP filter sees it.
func (k *ikpLab) noStrayFrames(t *testing.T, mo, mi testutil.Mark) {
	t.Helper()
	for _, o := range []struct {
		w *testutil.WireOracle
		m testutil.Mark
	}{{k.oracleOut, mo}, {k.oracleIn, mi}} {
		if c := testutil.Tally(o.w.Frames(t, o.m), testutil.Flow{}); c[testutil.NonIP] != 0 {
			t.Errorf("%d frame(s) on the wire neither IP nor link control (%s): sent with an unwritten Ethernet header?", c[testutil.NonIP], c)
		}
	}
}

func TestOverlayIKEPacketOffloadOnModel(t *testing.T) {
	version := needCharon6(t)
	l := newLab(t)
	// 7.3's mlx5 (the test runs only on the next kernel), as
	// TestSwanPacketOffloadOnModel.
	testutil.UseNicmodelProfile(t, testutil.ProfileMlx5Upstream)
	// The lab's parts (ports, captures, files) belong to the test, not to a step.
	k := newIKPLab(t, l, ikeSiteHost)
	lanA, lanB := l.netns(t), l.netns(t)
	out, in := testutil.FlowOf("10.1.0.0/24", "10.2.0.0/24"), testutil.FlowOf("10.2.0.0/24", "10.1.0.0/24")
	t.Logf("charon %s on both hosts, a LAN behind each", version)
	veth(t, lanA, "l0", "10.1.0.1/24", k.a.ns, "p1", "10.1.0.254/24")
	veth(t, k.b.ns, "p1", "10.2.0.254/24", lanB, "l1", "10.2.0.1/24")
	run(t, "ip", "-n", lanA, "route", "add", "default", "via", "10.1.0.254")
	run(t, "ip", "-n", lanB, "route", "add", "default", "via", "10.2.0.254")
	for _, ns := range []string{k.a.ns, k.b.ns} {
		nsRun(t, ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	}
	// A host's NIC puts whole checksums on the wire; a veth leaves
	// them to one (TestSwanPacketOffloadOnModel says what that costs).
	nsRun(t, lanA, "ethtool", "-K", "l0", "tx", "off")
	nsRun(t, lanB, "ethtool", "-K", "l1", "tx", "off")

	step(t, "dry run: the connection asks charon for hw_offload = packet", func(t *testing.T) {
		mustContain(t, ovMust(t, k.a.ns, "apply", "--dry-run", "-f", k.a.file), "hw_offload = packet", "mode = tunnel", "needs strongSwan 6")
	})
	step(t, "apply both: charon packet-offloads the CHILD_SA's SAs and IN/OUT policies to a0", func(t *testing.T) {
		k.apply(t)
		// Each LAN is routed to the other host, as a site's gateway routes it.
		run(t, "ip", "-n", k.a.ns, "route", "replace", "10.2.0.0/24", "via", "192.168.70.2", "dev", "a0")
		run(t, "ip", "-n", k.b.ns, "route", "replace", "10.1.0.0/24", "via", "192.168.70.1", "dev", "b0")
		if o, err := try("ip", "netns", "exec", lanA, "ping", "-c", "3", "-i", "0.2", "-W", "3", "10.2.0.1"); err != nil {
			t.Fatalf("ping between the LANs: %v\n%s\n%s", err, o, ikePacketState(t, k.a.ns, "a0", k.b.ns, "b0"))
		}
	})
	step(t, "verify --traffic reports the packet-offloaded CHILD_SA; the model encrypts, the wire is ESP only", func(t *testing.T) {
		s0, mo, mi := ethStats(t, k.a.ns, "a0"), k.oracleOut.Drain(t), k.oracleIn.Drain(t)
		// The LAN's traffic during verify's window (--send-to would send
		// from the host, which the LAN's selectors do not cover).
		ping := exec.Command("ip", "netns", "exec", lanA, "ping", "-c", "20", "-i", "0.2", "-W", "3", "10.2.0.1")
		if err := ping.Start(); err != nil {
			t.Fatal(err)
		}
		o := ovMust(t, k.a.ns, "verify", "-f", k.a.file, "--traffic", "--window", "2s")
		pingErr := ping.Wait()
		t.Logf("%s", o)
		mustContain(t, o, "CHILD_SA installed", "offload packet on a0 as asked", "tx_ipsec_packets", "verify: passed")
		if strings.Contains(o, "offload crypto") || strings.Contains(o, "offload none") {
			t.Fatalf("verify reports an SA that is not packet-offloaded:\n%s", o)
		}
		if pingErr != nil {
			t.Errorf("pings between the LANs during verify: %v", pingErr)
		}
		d := statDelta(s0, ethStats(t, k.a.ns, "a0"), "tx_ipsec_packets", "rx_ipsec_packets", "tx_cleartext_packets")
		t.Logf("a0: %v", d)
		if d["tx_ipsec_packets"] < 20 || d["rx_ipsec_packets"] < 20 {
			t.Errorf("a0 encrypted %d and decrypted %d packets for 20 pings", d["tx_ipsec_packets"], d["rx_ipsec_packets"])
		}
		k.oracleOut.NoCleartext(t, mo, out, "lanA's pings")
		k.oracleIn.NoCleartext(t, mi, in, "lanB's replies")
		k.noStrayFrames(t, mo, mi)
		if c := testutil.Tally(k.oracleOut.Frames(t, mo), testutil.FlowOf("192.168.70.1", "192.168.70.2")); c[testutil.ESP] < 20 {
			t.Errorf("the wire to B carried %s from A, want >= 20 ESP", c)
		}
		mustContain(t, ovMust(t, k.b.ns, "verify", "-f", k.b.file), "offload none as asked", "verify: passed")
	})
	step(t, "CHILD_SA and IKE_SA rekeys under traffic: 0 lost, 0 cleartext on the wire", func(t *testing.T) {
		ikeSA := ikeSAIDs(t, k.ch[0])
		sasBefore := espSPIs(t, k.a.ns)
		mo, mi := k.oracleOut.Drain(t), k.oracleIn.Drain(t)
		rekey := func(mode string, n int) *bench.RekeyReport {
			r, err := bench.RunRekey(context.Background(), bench.RekeyOptions{
				NSA: lanA, NSB: lanB, To: netip.MustParseAddr("10.2.0.1"), ViciA: k.ch[0].URI, ViciB: k.ch[1].URI,
				Rekeys: n, Interval: 2 * time.Second, Rate: 100, Mode: mode, Label: mode + " rekeys, packet offload on the model",
			})
			if err != nil {
				t.Fatalf("rekey bench (%s): %v", mode, err)
			}
			t.Logf("%s: %d rekeys (%s, kernel %s): sent %d, received %d, lost %d, duplicated %d, reordered %d",
				mode, len(r.Events), r.Charon, r.Kernel, r.Total.Sent, r.Total.Received, r.Total.Lost, r.Total.Duplicated, r.Total.Reordered)
			for _, e := range r.Events {
				if e.Error != "" {
					t.Errorf("%s rekey %d: %s", mode, e.N, e.Error)
				}
				if e.Lost != 0 {
					t.Errorf("%s rekey %d lost %d datagram(s) (longest gap %.0f ms): %s; counters %v", mode, e.N, e.Lost, e.LongestGapMS, e.Cause, e.Drops)
				}
			}
			if len(r.Events) != n || r.Total.Sent == 0 || r.Total.Lost != 0 {
				t.Errorf("%s: %d rekeys of %d, %d sent, %d lost", mode, len(r.Events), n, r.Total.Sent, r.Total.Lost)
			}
			return r
		}
		// The CHILD_SA: new SAs, packet-offloaded like the first.
		rekey(bench.RekeyChild, rekeyCount())
		waitOneCHILDSA(t, k.a.ns, "a0")
		sasChild := espSPIs(t, k.a.ns)
		if sasChild == sasBefore {
			t.Errorf("the SAs did not change across the CHILD_SA rekeys: %s", sasChild)
		}
		// The IKE_SA: new IKE keys and a new IKE_SA; the CHILD_SA moves to
		// it with its SAs as they are.
		rekey(bench.RekeyIKE, 2)
		if after := ikeSAIDs(t, k.ch[0]); after == ikeSA || after == "" {
			t.Errorf("the IKE_SA did not change across the IKE_SA rekeys: %q before, %q after", ikeSA, after)
		}
		if sas := espSPIs(t, k.a.ns); sas != sasChild {
			t.Errorf("the ESP SAs changed across IKE_SA rekeys: %s, then %s", sasChild, sas)
		}
		k.oracleOut.NoCleartext(t, mo, out, "the stream during the rekeys")
		k.oracleIn.NoCleartext(t, mi, in, "the replies during the rekeys")
		k.noStrayFrames(t, mo, mi)
		checkIKEPacketOffload(t, k.a.ns, "a0")
		mustContain(t, ovMust(t, k.a.ns, "verify", "-f", k.a.file), "offload packet on a0 as asked", "verify: passed")
	})
	step(t, "teardown: the SAs leave the model", func(t *testing.T) {
		ovMust(t, k.a.ns, "teardown", "-f", k.a.file)
		ovMust(t, k.b.ns, "teardown", "-f", k.b.file)
		if c := ethStats(t, k.a.ns, "a0")["ipsec_sa_count"]; c != 0 {
			t.Fatalf("a0 holds %d SAs after teardown:\n%s", c, run(t, "ip", "-n", k.a.ns, "xfrm", "state"))
		}
	})
}

// TestOverlayIKEPacketOffloadVTEPOnModel is the overlay's own traffic
// through a packet-offloaded IKE tunnel: Geneve between VTEPs on lo, sent
// by the host itself. It failed while the NIC model classified such a
// frame by the Ethernet header the kernel never wrote (docs/testing.md
// "The next kernel"): the frames left the port as they were, neither IP
// nor ESP.
func TestOverlayIKEPacketOffloadVTEPOnModel(t *testing.T) {
	version := needCharon6(t)
	l := newLab(t)
	testutil.UseNicmodelProfile(t, testutil.ProfileMlx5Upstream) // 7.3's mlx5
	k := newIKPLab(t, l, ikeVTEPHost)
	step(t, "two hosts with charon "+version+" and a Geneve VTEP each; apply both", func(t *testing.T) {
		k.apply(t)
	})
	step(t, "the VTEPs' traffic is encrypted by the model; nothing else crosses the wire", func(t *testing.T) {
		s0, mo, mi := ethStats(t, k.a.ns, "a0"), k.oracleOut.Drain(t), k.oracleIn.Drain(t)
		if o, err := try("ip", "netns", "exec", k.a.ns, "ping", "-c", "5", "-i", "0.2", "-W", "3", "192.168.91.2"); err != nil {
			t.Errorf("ping across the overlay: %v\n%s\n%s", err, o, ikePacketState(t, k.a.ns, "a0", k.b.ns, "b0"))
		}
		k.noStrayFrames(t, mo, mi)
		k.oracleOut.NoCleartext(t, mo, testutil.FlowOf("192.168.81.1", "192.168.81.2"), "A's VTEP traffic")
		if d := statDelta(s0, ethStats(t, k.a.ns, "a0"), "tx_ipsec_packets"); d["tx_ipsec_packets"] < 5 {
			t.Errorf("a0 encrypted %d packets for 5 pings across the overlay", d["tx_ipsec_packets"])
		}
		mustContain(t, ovMust(t, k.a.ns, "verify", "-f", k.a.file, "--traffic", "--send-to", "192.168.91.2", "--window", "2s"),
			"offload packet on a0 as asked", "verify: passed")
	})
}

// checkIKEPacketOffload: ns has one CHILD_SA's two ESP SAs, both
// packet-offloaded to dev, its IN and OUT policies too (FWD never: mlx5
// refuses them, strongSwan does not ask), and the model holds the two SAs.
func checkIKEPacketOffload(t *testing.T, ns, dev string) {
	t.Helper()
	st := run(t, "ip", "-n", ns, "xfrm", "state")
	dirs := map[string]int{}
	for _, m := range xfrmOffloadRe.FindAllStringSubmatch(st, -1) {
		if m[1] != dev {
			t.Errorf("an SA is offloaded to %s, want %s", m[1], dev)
		}
		dirs[m[2]]++
	}
	if dirs["in"] != 1 || dirs["out"] != 1 || strings.Count(st, "proto esp") != 2 {
		t.Fatalf("%s's SAs: %v packet-offloaded of %d, want one in and one out:\n%s", ns, dirs, strings.Count(st, "proto esp"), st)
	}
	pol := run(t, "ip", "-n", ns, "xfrm", "policy")
	if tunnel, _ := offloadedPolicies(pol, dev); tunnel != 2 {
		t.Fatalf("%d packet-offloaded policies with a template on %s, want 2 (IN and OUT):\n%s", tunnel, dev, pol)
	}
	if c := ethStats(t, ns, dev)["ipsec_sa_count"]; c != 2 {
		t.Fatalf("%s holds %d SAs, want 2", dev, c)
	}
}

// waitOneCHILDSA waits until the old SAs of a rekey have left ns and its
// port dev (charon keeps a rekeyed inbound SA delete_rekeyed_delay, 5 s):
// two ESP SAs in the kernel and two in the model, then checks that they
// are offloaded as the first were.
func waitOneCHILDSA(t *testing.T, ns, dev string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		c, st := ethStats(t, ns, dev)["ipsec_sa_count"], run(t, "ip", "-n", ns, "xfrm", "state")
		if c == 2 && strings.Count(st, "proto esp") == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d SAs and the kernel %d 20 s after the rekeys, want 2:\n%s", dev, c, strings.Count(st, "proto esp"), st)
		}
	}
	checkIKEPacketOffload(t, ns, dev)
}

// ikeSAIDs is the unique ids of charon's IKE_SAs, in the order it lists
// them: a rekeyed IKE_SA gets a new one.
func ikeSAIDs(t *testing.T, c *swan.Charon) string {
	t.Helper()
	cl, err := swan.Connect(context.Background(), c.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sas, err := cl.ListSAs()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range sas {
		if s.State == "ESTABLISHED" {
			ids = append(ids, s.Name+"#"+s.UniqueID)
		}
	}
	return strings.Join(ids, " ")
}

// espSPIs is the SPIs of ns's ESP SAs, as `ip xfrm state` lists them.
func espSPIs(t *testing.T, ns string) string {
	t.Helper()
	var spis []string
	fields := strings.Fields(run(t, "ip", "-n", ns, "xfrm", "state"))
	for i := 0; i+1 < len(fields); i++ {
		if fields[i] == "spi" {
			spis = append(spis, fields[i+1])
		}
	}
	return strings.Join(spis, " ")
}

// ikePacketState is what both hosts' kernels and ports say, for a failure's
// message: the SAs with their counters, the policies, the XFRM error
// counters, the ports' counters, routes and neighbours.
func ikePacketState(t *testing.T, nsA, portA, nsB, portB string) string {
	t.Helper()
	var b strings.Builder
	for _, h := range [][2]string{{nsA, portA}, {nsB, portB}} {
		fmt.Fprintf(&b, "=== %s\n", h[0])
		for _, args := range [][]string{{"-s", "xfrm", "state"}, {"xfrm", "policy"}, {"route"}, {"neigh"}, {"-br", "addr"}} {
			out, _ := try("ip", append([]string{"-n", h[0]}, args...)...)
			fmt.Fprintf(&b, "--- ip %s\n%s", strings.Join(args, " "), out)
		}
		out, _ := try("ip", "netns", "exec", h[0], "sh", "-c", "grep -v ' 0$' /proc/net/xfrm_stat")
		fmt.Fprintf(&b, "--- xfrm_stat (non-zero)\n%s", out)
		fmt.Fprintf(&b, "--- %s: %v\n", h[1], ethStats(t, h[0], h[1]))
	}
	return b.String()
}
