// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"sluice/internal/driverquirk"
	"sluice/internal/fastpath"
	"sluice/internal/flower"
	"sluice/internal/kernel/xfrm"
	"sluice/internal/testutil"
)

// flowerLab is seed 004's port layout in namespaces, on the NIC model
// (kmod/nicmodel): lan host `a` sends cleartext tagged with VLAN 502 to the
// gateway's p0 (p0.502 is the VLAN child); the gateway's wan0 is a model
// port wired to b's wan0. The gateway's kernel holds two real tunnels (IPv4
// and IPv6 inside, IPv4 outside), their OUT policies and SAs
// packet-offloaded on wan0 (`ip xfrm ... offload packet dev wan0`), their
// FWD policies the kernel's (never offloaded); b decrypts in software and
// owns 48.0.0.1 and 2001:db8:48::1. The gateway does not forward in
// software (forwarding off, no XDP): only flower rules (skip_hw on the veth
// p0, which takes no hardware rules) move packets from p0 into wan0, where
// the model encrypts what its offloaded policies select and sends the rest
// as it is, like a NIC. b's wan0 holds no offloaded SA, so its
// rx_cleartext_packets counts every non-ESP IP packet that crossed the
// wire (a capture on b would also show b's own decrypted packets).
//
//	a lan.502 -- p0.502 [gw: flower p0 -> wan0] wan0 ==model wire== wan0 [b: esp4] lo 48.0.0.1
type flowerLab struct {
	owner          *testing.T // the top-level test: resources outlive steps
	a, gw, b       string
	ip             string // an ip(8) that knows "offload packet"
	p0, p0vl, wan  int
	gwWanMAC, bMAC net.HardwareAddr
	router         staticRouter
	ports          []flower.Port
	snap           fastpath.Snapshot // the gateway's kernel, as the mirror reads it
	tier           *flower.Tier      // when a test runs one: its skips explain a wait that failed
	// profile is the NIC model's driver profile; tunnels the selectors
	// the lab runs (per host under an exact-match profile).
	profile string
	tunnels []labTunnel
	// quirks is wan0's driver quirks as the tier reads them (Derive's
	// input in the tests that call it).
	quirks map[int]flower.DeviceQuirks
	// oracle captures b's port's tap: what crossed the model's wire.
	oracle *testutil.WireOracle
}

type labTunnel struct {
	reqid, spi int
	src, dst   string
}

// The lab's tunnels: reqid, first SPI, selector. Subnet selectors, as
// strongSwan's traffic selectors usually are.
var labTunnels = []labTunnel{
	{10, 0x100a, "10.0.0.0/24", "48.0.0.0/16"},
	{20, 0x1014, "2001:db8:16::/64", "2001:db8:48::/48"},
}

// perHostTunnels are the same tunnels as sluice recommends them on a
// driver that matches selector addresses exactly (mlx5 before 6.15): one
// policy per host pair, /32 and /128 (docs/flower.md, "What the device
// would send in cleartext").
var perHostTunnels = []labTunnel{
	{10, 0x100a, "10.0.0.1/32", "48.0.0.1/32"},
	{20, 0x1014, "2001:db8:16::1/128", "2001:db8:48::1/128"},
}

// profiles are the NIC model's mlx5 profiles every flower VM test runs
// under (kmod/nicmodel/README.md, "Driver profiles"), whatever
// $SLUICE_NICMODEL_PROFILE says.
var profiles = []string{testutil.ProfileMlx5_612, testutil.ProfileMlx5Upstream}

// underEachProfile runs body once per mlx5 profile, as a subtest named
// after it, with the model switched to it.
func underEachProfile(t *testing.T, body func(t *testing.T, profile string)) {
	for _, prof := range profiles {
		t.Run(prof, func(t *testing.T) {
			testutil.UseNicmodelProfile(t, prof)
			body(t, prof)
		})
	}
}

const labKey = "0x0102030405060708090a0b0c0d0e0f1011121314"

func newFlowerLab(t *testing.T, l *lab, profile string) *flowerLab {
	t.Helper()
	return newFlowerLabOn(t, l, profile, false)
}

// newFlowerLabOn builds the lab under a driver profile (the caller has
// switched the model to it); with hwLAN, a's lan and the gateway's p0 are
// a pair of model ports too, so p0 takes hardware (skip_sw) rules. Under
// an exact-match profile the tunnels are per host, and the lab first shows
// the tier refusing a subnet selector (exact-selector-match); under every
// mlx5 profile it shows the tier keeping outbound rules off wan0, whose
// SA miss sends cleartext (no-tx-miss-rule). The test then calls
// dropSAMisses before it installs rules.
func newFlowerLabOn(t *testing.T, l *lab, profile string, hwLAN bool) *flowerLab {
	t.Helper()
	f := &flowerLab{owner: l.owner, ip: testutil.IPPacket(t), profile: profile, tunnels: labTunnels}
	if driverquirk.ForModel(profile, "").Has(driverquirk.ExactSelectorMatch) {
		f.tunnels = perHostTunnels
	}
	step(t, "topology", func(t *testing.T) {
		f.a, f.gw, f.b = l.netns(t), l.netns(t), l.netns(t)
		// One ip -batch per namespace: a process costs about a second in the
		// loaded TCG guest.
		var a, gw, b [][]string
		if hwLAN {
			testutil.NicPair(t, f.gw, "p0", f.a, "lanx")
			a = append(a, strings.Fields("link set lanx down"), strings.Fields("link set lanx name lan"), strings.Fields("link set lan up"))
		} else {
			veth(t, f.a, "lan", "", f.gw, "p0", "")
		}
		testutil.NicPair(t, f.gw, "wan0", f.b, "wanb")
		// No ND or MLD from the gateway: b's counters are the leak check
		// (b keeps IPv6: it delivers the decrypted IPv6 tunnel's packets).
		nsRun(t, f.gw, "sysctl", "-qw", "net.ipv6.conf.wan0.disable_ipv6=1", "net.ipv4.ip_forward=0", "net.ipv6.conf.all.forwarding=0")
		b = append(b, strings.Fields("link set wanb down"), strings.Fields("link set wanb name wan0"),
			strings.Fields("addr add 123.0.0.2/24 dev wan0"), strings.Fields("link set wan0 up"),
			strings.Fields("addr add 48.0.0.1/32 dev lo"), strings.Fields("addr add 2001:db8:48::1/128 dev lo"))
		gw = append(gw, strings.Fields("addr add 123.0.0.1/24 dev wan0"), strings.Fields("link set wan0 up"),
			strings.Fields("link add link p0 name p0.502 type vlan id 502"),
			strings.Fields("addr add 10.0.0.254/24 dev p0.502"), strings.Fields("addr add 2001:db8:16::254/64 dev p0.502 nodad"),
			strings.Fields("link set p0.502 up"))
		a = append(a, strings.Fields("link add link lan name lan.502 type vlan id 502"),
			strings.Fields("addr add 10.0.0.1/24 dev lan.502"), strings.Fields("addr add 2001:db8:16::1/64 dev lan.502 nodad"),
			strings.Fields("link set lan.502 up"),
			strings.Fields("route add 48.0.0.0/8 via 10.0.0.254"), strings.Fields("route add 2001:db8:48::/48 via 2001:db8:16::254"))
		batch(t, "ip", f.a, a)
		batch(t, "ip", f.gw, gw)
		batch(t, "ip", f.b, b)
		// a resolves the gateway's MAC the ordinary way.
		nsRun(t, f.a, "ping", "-c", "1", "-W", "3", "10.0.0.254")
		nsRun(t, f.a, "ping", "-c", "1", "-W", "3", "2001:db8:16::254")
		f.p0, _ = link(t, f.gw, "p0")
		var vlMAC net.HardwareAddr
		f.p0vl, vlMAC = link(t, f.gw, "p0.502")
		f.wan, f.gwWanMAC = link(t, f.gw, "wan0")
		_, f.bMAC = link(t, f.b, "wan0")
		nh := flower.NextHop{Ifindex: f.wan, Name: "wan0", DstMAC: f.bMAC, SrcMAC: f.gwWanMAC, MTU: 1500}
		f.router = staticRouter{netip.MustParsePrefix("48.0.0.0/8"): nh, netip.MustParsePrefix("2001:db8:48::/48"): nh}
		f.ports = []flower.Port{
			{Name: "p0.502", Ifindex: f.p0vl, MAC: vlMAC, ParentIfindex: f.p0, ParentName: "p0", VLANID: 502, Outbound: true, TTL: true},
			{Name: "wan0", Ifindex: f.wan, L2FIB: true},
		}
		f.oracle = testutil.NicWireOracle(f.owner, f.b, "wan0")
	})
	step(t, "tunnels: packet-offloaded on the gateway's model port, software ESP at b", func(t *testing.T) {
		var gw, b [][]string
		for _, tu := range f.tunnels {
			tmpl := fmt.Sprintf("tmpl src 123.0.0.1 dst 123.0.0.2 proto esp reqid %d mode tunnel", tu.reqid)
			gw = append(gw, f.policyArgs(t, tu.reqid, "add"), f.saArgs(t, "add", tu.reqid, tu.spi),
				// strongSwan's fwd-out policy: an optional template.
				append([]string{"xfrm", "policy", "add", "src", tu.src, "dst", tu.dst, "dir", "fwd", "priority", "100"}, strings.Fields(tmpl+" level use")...))
			b = append(b, append([]string{"xfrm", "policy", "add", "src", tu.src, "dst", tu.dst, "dir", "in"}, strings.Fields(tmpl)...),
				f.peerSAArgs(t, tu.reqid, tu.spi))
		}
		batch(t, f.ip, f.gw, gw)
		batch(t, "ip", f.b, b)
		f.snap = f.kernelSnap(t)
		for _, st := range f.snap.States {
			if st.Offload == nil || st.Offload.Ifindex != f.wan || st.Offload.Flags&xfrm.OffloadPacket == 0 {
				t.Fatalf("the kernel's SA is not packet-offloaded on wan0: %+v", st)
			}
		}
	})
	step(t, "clsact on the ports", func(t *testing.T) {
		run(t, "tc", "-n", f.gw, "qdisc", "add", "dev", "p0", "clsact")
		run(t, "tc", "-n", f.b, "qdisc", "add", "dev", "wan0", "clsact")
		// What b receives through the rules and decrypts: b's kernel
		// re-injects the inner packet on wan0 under the outer MACs (the
		// model writes the gateway port's and the wire peer's), TTL /
		// hop limit 63 (a sends 64).
		for _, pr := range []struct{ pref, proto string }{{"10", "ip"}, {"11", "ipv6"}} {
			run(t, "tc", "-n", f.b, "filter", "add", "dev", "wan0", "ingress", "protocol", pr.proto, "pref", pr.pref,
				"flower", "skip_hw", "dst_mac", f.bMAC.String(), "src_mac", f.gwWanMAC.String(), "ip_proto", "udp", "ip_ttl", "63", "action", "pass")
		}
	})
	f.quirks = f.readQuirks(t)
	if f.quirks[f.wan].ExactSelectors {
		step(t, "a subnet selector on an exact-match driver: no rule, and the tier says why", func(t *testing.T) {
			// The lab's own subnets, as a third tunnel to 49/16 (the
			// per-host tunnels' rules stay as they are): the driver would
			// send the rest of the subnet in cleartext, the kernel's own
			// path included, so it is the configuration that leaks; the
			// tier keeps the rule off and names the fix.
			gw := [][]string{
				strings.Fields("xfrm policy add src 10.0.0.0/24 dst 49.0.0.0/16 dir out priority 100 tmpl src 123.0.0.1 dst 123.0.0.2 proto esp reqid 30 mode tunnel offload packet dev wan0"),
				strings.Fields("xfrm state add src 123.0.0.1 dst 123.0.0.2 proto esp spi 0x101e reqid 30 mode tunnel aead rfc4106(gcm(aes)) " + labKey + " 128 sel src 10.0.0.0/24 dst 49.0.0.0/16 offload packet dev wan0 dir out"),
			}
			batch(t, f.ip, f.gw, gw)
			defer batch(t, f.ip, f.gw, [][]string{
				strings.Fields("xfrm policy delete src 10.0.0.0/24 dst 49.0.0.0/16 dir out"),
				strings.Fields("xfrm state delete src 123.0.0.1 dst 123.0.0.2 proto esp spi 0x101e"),
			})
			f.router[netip.MustParsePrefix("49.0.0.0/8")] = f.router[netip.MustParsePrefix("48.0.0.0/8")]
			defer delete(f.router, netip.MustParsePrefix("49.0.0.0/8"))
			snap, q := f.kernelSnap(t), f.quirks[f.wan]
			q.NoTXMiss = false // this step is row 1's
			res := flower.Derive(flower.Input{Views: fastpath.PolicyViews(snap), Ports: f.ports, Router: f.router, InboundChain: 1, Quirks: map[int]flower.DeviceQuirks{f.wan: q}})
			if n := forwardsTo(res, "49.0.0.0/16"); n != 0 || !skipped(res, "exact-selector-match", "/32") {
				t.Fatalf("the subnet tunnel got %d rules, or no reason naming the row and the fix: %v", n, res.Skips)
			}
			if n := forwardsTo(res, ""); n != len(f.tunnels) {
				t.Fatalf("the per-host tunnels got %d rules, want %d: %v", n, len(f.tunnels), res.Skips)
			}
		})
	}
	step(t, "the profile's SA miss sends cleartext: no outbound rule into wan0, and the tier says why", func(t *testing.T) {
		if !f.quirks[f.wan].NoTXMiss {
			t.Fatalf("%s: the tier does not see the model's SA miss (%+v)", f.profile, f.quirks[f.wan])
		}
		res := f.derive()
		if n := forwardsTo(res, ""); n != 0 || !skipped(res, "no-tx-miss-rule") || len(res.Skips) != len(f.tunnels) {
			t.Fatalf("%d rules into a device that sends an SA miss in cleartext; skips %v", n, res.Skips)
		}
	})
	return f
}

// readQuirks reads wan0's driver quirks in the gateway, as the tier does.
func (f *flowerLab) readQuirks(t *testing.T) map[int]flower.DeviceQuirks {
	t.Helper()
	var q flower.DeviceQuirks
	inNetns(t, f.gw, func() { q = flower.ReadDeviceQuirks("wan0") })
	t.Logf("wan0: %+v", q)
	return map[int]flower.DeviceQuirks{f.wan: q}
}

// dropSAMisses sets the model's SA-miss switch to drop (tx_miss_cleartext
// 0) for the rest of the test: a device whose TX SA table drops what no SA
// serves (no mlx5 read so far; every other row stays the profile's). The
// tier reads it (driverquirk.ForDevice) and places rules into wan0 again;
// what the tests check from here is the rules on packets.
func (f *flowerLab) dropSAMisses(t *testing.T, l *lab) {
	t.Helper()
	run(t, "sh", "-c", "echo 0 > /sys/module/nicmodel/parameters/tx_miss_cleartext")
	l.Undo("sh", "-c", "echo -1 > /sys/module/nicmodel/parameters/tx_miss_cleartext")
	f.quirks = f.readQuirks(t)
	if q := f.quirks[f.wan]; q.NoTXMiss {
		t.Fatalf("tx_miss_cleartext=0, yet the tier reads wan0 as sending SA misses in cleartext: %+v", q)
	}
}

// forwardsTo counts the forwarding rules whose destination is dst ("":
// all).
func forwardsTo(res flower.Result, dst string) int {
	n := 0
	for _, r := range res.Rules {
		if r.Kind == flower.KindForward && (dst == "" || r.Dst.String() == dst) {
			n++
		}
	}
	return n
}

// skipped reports whether some skip's reason contains every one of want.
func skipped(res flower.Result, want ...string) bool {
	for _, s := range res.Skips {
		all := true
		for _, w := range want {
			all = all && strings.Contains(s.Reason, w)
		}
		if all {
			return true
		}
	}
	return false
}

// sa adds (or deletes, or updates) the gateway's outbound SA of a tunnel,
// packet-offloaded on wan0.
func (f *flowerLab) sa(t *testing.T, verb string, reqid, spi int, extra ...string) {
	t.Helper()
	run(t, f.ip, append([]string{"-n", f.gw}, f.saArgs(t, verb, reqid, spi, extra...)...)...)
}

func (f *flowerLab) saArgs(t *testing.T, verb string, reqid, spi int, extra ...string) []string {
	args := []string{"xfrm", "state", verb, "src", "123.0.0.1", "dst", "123.0.0.2", "proto", "esp", "spi", fmt.Sprint(spi)}
	if verb != "delete" {
		src, dst := f.sel(t, reqid)
		args = append(args, "reqid", fmt.Sprint(reqid), "mode", "tunnel", "aead", "rfc4106(gcm(aes))", labKey, "128", "sel", "src", src, "dst", dst)
		args = append(args, extra...)
		args = append(args, "offload", "packet", "dev", "wan0", "dir", "out")
	}
	return args
}

// peerSA adds b's inbound software SA for a tunnel's SPI.
func (f *flowerLab) peerSA(t *testing.T, reqid, spi int) {
	t.Helper()
	run(t, "ip", append([]string{"-n", f.b}, f.peerSAArgs(t, reqid, spi)...)...)
}

func (f *flowerLab) peerSAArgs(t *testing.T, reqid, spi int) []string {
	src, dst := f.sel(t, reqid)
	return []string{"xfrm", "state", "add", "src", "123.0.0.1", "dst", "123.0.0.2", "proto", "esp", "spi", fmt.Sprint(spi),
		"reqid", fmt.Sprint(reqid), "mode", "tunnel", "replay-window", "64", "aead", "rfc4106(gcm(aes))", labKey, "128", "sel", "src", src, "dst", dst}
}

// policy adds or deletes the gateway's OUT policy of a tunnel,
// packet-offloaded on wan0.
func (f *flowerLab) policy(t *testing.T, reqid int, verb string) {
	t.Helper()
	run(t, f.ip, append([]string{"-n", f.gw}, f.policyArgs(t, reqid, verb)...)...)
}

func (f *flowerLab) policyArgs(t *testing.T, reqid int, verb string) []string {
	src, dst := f.sel(t, reqid)
	args := []string{"xfrm", "policy", verb, "src", src, "dst", dst, "dir", "out"}
	if verb != "delete" {
		args = append(args, strings.Fields(fmt.Sprintf("priority 100 tmpl src 123.0.0.1 dst 123.0.0.2 proto esp reqid %d mode tunnel offload packet dev wan0", reqid))...)
	}
	return args
}

// batch runs ip(8) commands (argument lists) in one process: a process
// costs about a second in the loaded TCG guest.
func batch(t *testing.T, ip, ns string, cmds [][]string) {
	t.Helper()
	var b strings.Builder
	for _, c := range cmds {
		b.WriteString(strings.Join(c, " ") + "\n")
	}
	file := filepath.Join(t.TempDir(), "ip.batch")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, ip, "-n", ns, "-batch", file)
}

// sel is a lab tunnel's selector.
func (f *flowerLab) sel(t *testing.T, reqid int) (string, string) {
	for _, tu := range f.tunnels {
		if tu.reqid == reqid {
			return tu.src, tu.dst
		}
	}
	t.Fatalf("no lab tunnel with reqid %d", reqid)
	return "", ""
}

// source is the gateway's XFRM database as the mirror reads it; its
// namespace handle lives as long as the whole test (a mirror started in
// one step runs through the next ones).
func (f *flowerLab) source(t *testing.T) fastpath.KernelSource {
	t.Helper()
	h, err := netns.GetFromName(f.gw)
	if err != nil {
		t.Fatal(err)
	}
	f.owner.Cleanup(func() { h.Close() })
	return fastpath.KernelSource{X: xfrm.HandleAt(h)}
}

// kernelSnap dumps the gateway's real policies and SAs and the route MTU
// under each SA, as the mirror's first publish holds them.
func (f *flowerLab) kernelSnap(t *testing.T) fastpath.Snapshot {
	t.Helper()
	src := f.source(t)
	snap, err := src.Dump()
	if err != nil {
		t.Fatal(err)
	}
	fastpath.FillRouteMTU(&snap, src.PathMTU)
	return snap
}

// wireMark is a point on the wire: the oracle's capture and b's port's
// counters, for the leak checks after it.
type wireMark struct {
	m      testutil.Mark
	before map[string]uint64
}

func (f *flowerLab) wireMark(t *testing.T) wireMark {
	t.Helper()
	return wireMark{f.oracle.Drain(t), testutil.EthStats(t, f.b, "wan0")}
}

// wireLeaks is what crossed the model's wire to b since w and should have
// been ESP (every cleartext and non-IP frame: the gateway sends nothing
// else on wan0 but link control), as b's port's tap captured it.
func (f *flowerLab) wireLeaks(t *testing.T, w wireMark) []testutil.Frame {
	t.Helper()
	return f.oracle.Leaks(t, w.m, testutil.Flow{})
}

// noCleartext fails the test if any frame crossed the wire in cleartext
// since w (the capture says so, not the model), then checks the model's
// own count of b's cleartext against the capture.
func (f *flowerLab) noCleartext(t *testing.T, w wireMark, what string) {
	t.Helper()
	f.oracle.NoCleartext(t, w.m, testutil.Flow{}, what)
	testutil.WireAgrees(t, f.oracle, w.m, f.b, "wan0", w.before)
}

// encrypted is the number of packets the gateway's model port encrypted.
func (f *flowerLab) encrypted(t *testing.T) uint64 {
	t.Helper()
	return testutil.EthStats(t, f.gw, "wan0")["tx_ipsec_packets"]
}

func (f *flowerLab) derive() flower.Result {
	return flower.Derive(flower.Input{Views: fastpath.PolicyViews(f.snap), Ports: f.ports, Router: f.router, InboundChain: 1, Quirks: f.quirks})
}
