// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"sluice/internal/flower"
	"sluice/internal/kernel/tcflower"
	"sluice/internal/testutil"
)

// listenUDP opens a UDP socket inside ns and returns a function that
// counts the datagrams received until a quiet second.
func listenUDP(t *testing.T, ns, addr string) func() int {
	t.Helper()
	var c net.PacketConn
	inNetns(t, ns, func() {
		var err error
		if c, err = net.ListenPacket("udp", addr); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { c.Close() })
	return func() int {
		n := 0
		buf := make([]byte, 2048)
		for {
			c.SetReadDeadline(time.Now().Add(time.Second))
			if _, _, err := c.ReadFrom(buf); err != nil {
				return n
			}
			n++
		}
	}
}

// TestFlowerRulesOnPackets installs the rules Derive makes from the
// gateway's real packet-offloaded SAs (read as the mirror reads them) and
// sends UDP through them: with kernel forwarding off, only the rules move
// it from VLAN 502 into the model's port (tag popped, TTL/hop limit 63, MACs
// rewritten, IPv4 checksum valid), the model encrypts every packet and b
// decrypts it; the wire carries ESP only. TTL 1 stays on the host;
// reconcile; removal stops forwarding. Under each mlx5 profile
// (newFlowerLabOn: the tier first refuses what the profile would leak).
func TestFlowerRulesOnPackets(t *testing.T) { underEachProfile(t, testFlowerRulesOnPackets) }

func testFlowerRulesOnPackets(t *testing.T, profile string) {
	l := newLab(t)
	f := newFlowerLab(t, l, profile)
	f.dropSAMisses(t, l)
	var fs *tcflower.Socket
	inst := &flower.Installer{SkipHW: true}
	var res flower.Result
	step(t, "derive", func(t *testing.T) {
		res = f.derive()
		if len(res.Rules) != 6 || len(res.Skips) != 0 {
			t.Fatalf("want 2 forwards and 4 guards, got %d rules, skips %v:\n%v", len(res.Rules), res.Skips, res.Rules)
		}
	})
	fs = openTC(t, f.gw)
	inst.FS = fs
	step(t, "veth refuses skip_sw: production rules never run in software", func(t *testing.T) {
		p := flower.Probe(fs, f.p0, 0)
		if p.OK {
			t.Fatal("a veth accepted a skip_sw rule")
		}
		t.Logf("probe: %s", p.Msg)
		if out := run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress"); strings.TrimSpace(out) != "" {
			t.Fatalf("the refused probe left a filter:\n%s", out)
		}
	})
	step(t, "install (lab: skip_hw)", func(t *testing.T) {
		st, errs, err := inst.Apply(res.Rules)
		if err != nil || len(errs) != 0 || st.Added != 6 {
			t.Fatalf("apply: %+v %v %v", st, errs, err)
		}
		out := run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress")
		mustContain(t, out, "skip_hw", "vlan_id 502", "dst_mac", "pedit", "csum", "police", "vlan", "pop", "mirred (Egress Redirect to device wan0)")
		if strings.Contains(out, "skip_sw") {
			t.Fatalf("lab rules must be skip_hw only:\n%s", out)
		}
	})
	recv4 := listenUDP(t, f.b, "48.0.0.1:9999")
	recv6 := listenUDP(t, f.b, "[2001:db8:48::1]:9999")
	enc0, wire0 := f.encrypted(t), f.wireMark(t)
	step(t, "IPv4: VLAN popped, TTL 63, MACs rewritten, valid checksum, into wan0, encrypted by the model", func(t *testing.T) {
		sendUDP(t, f.a, netip.MustParseAddr("48.0.0.1"), 9999, 64, 3)
		if n := recv4(); n != 3 {
			t.Fatalf("b's socket received %d of 3 (a bad IP checksum is dropped by b's kernel)\n%s", n,
				run(t, "tc", "-n", f.gw, "-s", "filter", "show", "dev", "p0", "ingress"))
		}
		if n := pktCount(t, f.b, "wan0", "10"); n != 3 {
			t.Fatalf("b counted %d decrypted TTL-63 packets under the gateway's MAC, want 3", n)
		}
		if n := f.encrypted(t) - enc0; n != 3 {
			t.Fatalf("the model encrypted %d of the 3 packets the rule redirected into wan0", n)
		}
	})
	step(t, "IPv6: hop limit 63", func(t *testing.T) {
		sendUDP(t, f.a, netip.MustParseAddr("2001:db8:48::1"), 9999, 64, 3)
		if n := recv6(); n != 3 {
			t.Fatalf("b received %d of 3; gateway's wan0: %v\n%s", n, testutil.EthStats(t, f.gw, "wan0"),
				run(t, "ip", "-n", f.b, "-s", "xfrm", "state"))
		}
		if n := pktCount(t, f.b, "wan0", "11"); n != 3 {
			t.Fatalf("b counted %d hop-limit-63 packets, want 3", n)
		}
	})
	step(t, "TTL 1 goes to the host, not out of wan0", func(t *testing.T) {
		sendUDP(t, f.a, netip.MustParseAddr("48.0.0.1"), 9999, 1, 2)
		if n := recv4(); n != 0 {
			t.Fatalf("b received %d TTL-1 packets", n)
		}
		if n := pktCount(t, f.gw, "p0", "49001"); n < 2 {
			t.Fatalf("the TTL guard counted %d, want >= 2\n%s", n, run(t, "tc", "-n", f.gw, "-s", "filter", "show", "dev", "p0", "ingress"))
		}
	})
	step(t, "reconcile: a foreign filter at our priorities goes, a lost rule comes back", func(t *testing.T) {
		run(t, "tc", "-n", f.gw, "filter", "add", "dev", "p0", "ingress", "protocol", "ip", "pref", "49005", "handle", "0x999",
			"flower", "skip_hw", "dst_ip", "48.0.0.0/8", "action", "drop")
		out := run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress", "pref", "49004")
		var ipv6Handle string
		for _, blk := range strings.Split(out, "filter protocol") {
			if strings.Contains(blk, "eth_type ipv6") && strings.Contains(blk, "handle") {
				fields := strings.Fields(blk[strings.Index(blk, "handle"):])
				ipv6Handle = fields[1]
			}
		}
		if ipv6Handle == "" {
			t.Fatalf("no IPv6 forward in:\n%s", out)
		}
		run(t, "tc", "-n", f.gw, "filter", "del", "dev", "p0", "ingress", "protocol", "802.1Q", "pref", "49004", "handle", ipv6Handle, "flower")
		var removed, missing int
		var err error
		inNetns(t, f.gw, func() { removed, missing, err = inst.Reconcile([]int{f.p0}) })
		if err != nil || removed != 1 || missing != 1 {
			t.Fatalf("reconcile: removed %d missing %d err %v", removed, missing, err)
		}
		st, errs, err := inst.Apply(res.Rules)
		if err != nil || len(errs) != 0 || st.Added != 1 {
			t.Fatalf("re-apply: %+v %v %v", st, errs, err)
		}
		sendUDP(t, f.a, netip.MustParseAddr("2001:db8:48::1"), 9999, 64, 2)
		if n := recv6(); n != 2 {
			t.Fatalf("after reconcile b received %d of 2", n)
		}
	})
	step(t, "the wire carried ESP only", func(t *testing.T) {
		f.noCleartext(t, wire0, "the rules' traffic")
		if n := f.encrypted(t) - enc0; n != 8 {
			t.Fatalf("the model encrypted %d packets, want the 8 the rules forwarded", n)
		}
	})
	step(t, "removing the rules stops forwarding", func(t *testing.T) {
		st, errs, err := inst.Apply(nil)
		if err != nil || len(errs) != 0 || st.Removed != 6 {
			t.Fatalf("remove: %+v %v %v", st, errs, err)
		}
		if out := run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress"); strings.TrimSpace(out) != "" {
			t.Fatalf("filters left:\n%s", out)
		}
		sendUDP(t, f.a, netip.MustParseAddr("48.0.0.1"), 9999, 64, 2)
		if n := recv4(); n != 0 {
			t.Fatalf("b received %d packets with no rule and forwarding off", n)
		}
	})
}

func TestFlowerProbeNetdevsim(t *testing.T) {
	l := newLab(t)
	ko := os.Getenv("SLUICE_NETDEVSIM")
	if ko == "" {
		t.Skip("SLUICE_NETDEVSIM unset: netdevsim.ko not built (scripts/vmtest.sh builds it with `sluice vm netdevsim`)")
	}
	loadNetdevsim(t, ko)
	var ns, dev string
	step(t, "new device with hw-tc-offload", func(t *testing.T) {
		ns = l.netns(t)
		id := freeNetdevsimID()
		nsRun(t, ns, "sh", "-c", fmt.Sprintf("echo '%d 1' > /sys/bus/netdevsim/new_device", id))
		l.owner.Cleanup(func() { os.WriteFile("/sys/bus/netdevsim/del_device", []byte(fmt.Sprint(id)), 0) })
		dev = netdevsimNetdev(t, ns, id)
		run(t, "ip", "-n", ns, "link", "set", dev, "up")
		nsRun(t, ns, "ethtool", "-K", dev, "hw-tc-offload", "on")
		run(t, "tc", "-n", ns, "qdisc", "add", "dev", dev, "clsact")
	})
	step(t, "probe refuses, with the kernel's reason; nothing is left installed", func(t *testing.T) {
		idx, _ := link(t, ns, dev)
		var p flower.ProbeResult
		inNetns(t, ns, func() {
			fs, err := tcflower.Open()
			if err != nil {
				t.Fatal(err)
			}
			defer fs.Close()
			p = flower.Probe(fs, idx, 0)
		})
		if p.OK || p.Msg == "" {
			t.Fatalf("netdevsim accepted a skip_sw flower rule, or gave no reason: %+v", p)
		}
		t.Logf("probe refused: %s\nadvice: %s", p.Msg, flower.ExplainRefusal(dev, p))
		if out := run(t, "tc", "-n", ns, "filter", "show", "dev", dev, "ingress"); strings.TrimSpace(out) != "" {
			t.Fatalf("filters left:\n%s", out)
		}
	})
}

// loadNetdevsim loads the module (and psample, which insmod does not
// resolve) unless an earlier test did.
func loadNetdevsim(t *testing.T, ko string) {
	t.Helper()
	if _, err := os.Stat("/sys/module/netdevsim"); err == nil {
		return
	}
	for _, dep := range strings.Split(strings.TrimSpace(run(t, "modinfo", "-F", "depends", ko)), ",") {
		if dep != "" {
			run(t, "modprobe", dep)
		}
	}
	run(t, "insmod", ko)
}
