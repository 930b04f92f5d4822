// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"strings"
	"testing"
	"time"

	"sluice/internal/diag"
	"sluice/internal/kernel/xfrm"
	"sluice/internal/testutil"
)

// TestNicmodelLeak: a frame no offloaded OUT policy selects leaves the
// model in cleartext, as it would leave a real NIC: a capture on B's port
// (the wire oracle, on the tap of B's port) sees
// it, and the model's counters agree. Frames that arrive without xfrm
// metadata (tc mirred here) are matched against the same policy table as
// the stack's.
func TestNicmodelLeak(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	h := l.newNMHosts(t, false, true)
	// Counting frames: no IPv6 router solicitations or MLD on the port.
	nsRun(t, h.nsA, "sysctl", "-qw", "net.ipv6.conf."+h.devA+".disable_ipv6=1")
	oracle, b0 := testutil.NicWireOracle(t, h.nsB, h.devB), ethStats(t, h.nsB, h.devB)
	defer testutil.WireAgrees(t, oracle, 0, h.nsB, h.devB, b0)
	ea, eb := h.ends()

	step(t, "no-policy-cleartext", func(t *testing.T) {
		s := nmKeys()
		s.skipAOutPolicy = true
		h.install(t, ip, s)
		before, m := ethStats(t, h.nsA, h.devA), oracle.Drain(t)
		_, _ = h.ping(t, 3) // B's IN policy drops the cleartext
		d := statDelta(before, ethStats(t, h.nsA, h.devA), "tx_cleartext_packets", "tx_ipsec_packets")
		leaks := oracle.Leaks(t, m, testutil.FlowOf(ea, eb))
		if len(leaks) < 3 || d["tx_cleartext_packets"] < uint64(len(leaks)) || d["tx_ipsec_packets"] != 0 {
			t.Fatalf("without an OUT policy: %d cleartext frames on the wire, A %v; want >= 3, as many counted, 0 ESP", len(leaks), d)
		}
	})
	step(t, "mirred-frames-meet-policies", func(t *testing.T) {
		// A frame mirred into the port by tc carries no xfrm state: only
		// the port's policy table decides. From 10.71.9.1 (on vc) it
		// leaks until an OUT policy selects 10.71.9.1/32 (a host
		// selector: mlx5 in 6.12 matches a subnet's network address
		// only, TestNicmodelProfileSubnetSelector).
		veth(t, h.nsA, "vc", "10.71.9.1/24", h.nsA, "vg", "")
		run(t, "tc", "-n", h.nsA, "qdisc", "add", "dev", "vg", "clsact")
		run(t, "tc", "-n", h.nsA, "filter", "add", "dev", "vg", "ingress", "matchall",
			"action", "pedit", "ex", "munge", "eth", "dst", "set", macOf(t, h.nsB, h.devB), "pipe",
			"action", "mirred", "egress", "redirect", "dev", h.devA)
		run(t, "ip", "-n", h.nsA, "route", "add", eb+"/32", "dev", "vc", "table", "100")
		run(t, "ip", "-n", h.nsA, "rule", "add", "from", "10.71.9.1", "lookup", "100")
		run(t, "ip", "-n", h.nsA, "neigh", "replace", eb, "lladdr", "02:00:00:00:00:01", "dev", "vc", "nud", "permanent")
		flow := testutil.FlowOf("10.71.9.1", eb)
		var leaked int // cleartext frames of the flow on the wire, last try
		mirred := func() map[string]uint64 {
			before, m := ethStats(t, h.nsA, h.devA), oracle.Drain(t)
			_, _ = try("ip", "netns", "exec", h.nsA, "ping", "-c", "3", "-i", "0.2", "-W", "1", "-I", "10.71.9.1", eb)
			leaked = len(oracle.Leaks(t, m, flow))
			return statDelta(before, ethStats(t, h.nsA, h.devA), "tx_ipsec_packets", "tx_cleartext_packets")
		}
		if d := mirred(); leaked < 3 || d["tx_cleartext_packets"] < 3 || d["tx_ipsec_packets"] != 0 {
			t.Fatalf("mirred frames no policy selects: %d cleartext on the wire, A %v, want >= 3 cleartext, 0 ESP", leaked, d)
		}
		run(t, ip, "-n", h.nsA, "xfrm", "policy", "add", "src", "10.71.9.1/32", "dst", eb+"/32", "dir", "out",
			"tmpl", "src", h.linkA, "dst", h.linkB, "proto", "esp", "reqid", "1", "mode", "tunnel",
			"offload", "packet", "dev", h.devA)
		// A full run on 2026-11-25 counted 1 cleartext frame beside the 3
		// ESP ones (not yet explained: the pings were all encrypted). A
		// leak of the mirred frames repeats on every try; a stray frame
		// of the host's own should not, so one more try decides.
		d := mirred()
		if leaked != 0 || d["tx_ipsec_packets"] < 3 || d["tx_cleartext_packets"] != 0 {
			t.Logf("mirred frames an OUT policy selects, first try: %d cleartext of the flow on the wire, A %v; trying again", leaked, d)
			d = mirred()
		}
		if leaked != 0 || d["tx_ipsec_packets"] < 3 || d["tx_cleartext_packets"] != 0 {
			t.Fatalf("mirred frames an OUT policy selects: %d cleartext of the flow on the wire, A %v, want >= 3 ESP, 0 cleartext", leaked, d)
		}
	})
}

// TestNicmodelLifetime: packet limits on an offloaded SA raise the
// kernel's soft and hard expire events from the device's counters (the
// xfrm core cannot count packet-offloaded traffic), and after the hard
// limit the device stops sending on the SA.
func TestNicmodelLifetime(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	h := l.newNMHosts(t, false, true)
	stop := xfrmMonitor(t, h.nsA, "expire")
	s := nmKeys()
	s.aOutX = []string{"limit", "packet-soft", "3", "limit", "packet-hard", "6"}
	h.install(t, ip, s)
	_, _ = h.ping(t, 10)
	time.Sleep(500 * time.Millisecond)
	mon := stop()
	if !strings.Contains(mon, "spi 0x00001001") || !strings.Contains(mon, "hard 0") || !strings.Contains(mon, "hard 1") {
		t.Errorf("ip xfrm monitor expire: want a soft (hard 0) and a hard (hard 1) expire of spi 0x1001:\n%s", mon)
	}
	if out := run(t, "ip", "-n", h.nsA, "xfrm", "state", "list", "spi", "0x1001"); strings.TrimSpace(out) != "" {
		t.Errorf("SA 0x1001 still installed after its hard packet limit:\n%s", out)
	}
	st := ethStats(t, h.nsA, h.devA)
	if st["tx_ipsec_packets"] != 6 {
		t.Errorf("model encrypted %d packets on an SA with a hard limit of 6", st["tx_ipsec_packets"])
	}
}

// TestNicmodelRefusals: what mlx5 refuses, the model refuses with the
// same extack messages, so probe and doctor paths meet the real errors.
func TestNicmodelRefusals(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	nsA, nsB := l.netns(t), l.netns(t)
	devA, _ := l.nicPair(t, nsA, nsB)
	sa := func(spi string, extra ...string) []string {
		a := []string{"-n", nsA, "xfrm", "state", "add", "src", "192.168.70.1", "dst", "192.168.70.2", "proto", "esp",
			"spi", spi, "mode", "tunnel"}
		return append(append(a, extra...), "offload", "packet", "dev", devA, "dir", "out")
	}
	gcm := []string{"reqid", "1", "aead", "rfc4106(gcm(aes))", nmKeyAB, "128"}
	refuse := func(t *testing.T, want string, args ...string) {
		t.Helper()
		out, err := try(ip, args...)
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("%s: err %v, want a refusal saying %q:\n%s", cmdline(ip, args), err, want, out)
		}
	}
	step(t, "icv-96", func(t *testing.T) {
		refuse(t, "ICV length other than 128bit", sa("0x10", "reqid", "1", "aead", "rfc4106(gcm(aes))", nmKeyAB, "96")...)
	})
	step(t, "cbc-hmac", func(t *testing.T) {
		refuse(t, "Cannot offload authenticated xfrm states", sa("0x11", "reqid", "1",
			"enc", "cbc(aes)", "0x000102030405060708090a0b0c0d0e0f", "auth", "hmac(sha256)", nmKeyAB)...)
	})
	step(t, "no-reqid", func(t *testing.T) {
		refuse(t, "Cannot offload without reqid", sa("0x12", "aead", "rfc4106(gcm(aes))", nmKeyAB, "128")...)
	})
	step(t, "fwd-policy", func(t *testing.T) {
		refuse(t, "Cannot offload forward policy", "-n", nsA, "xfrm", "policy", "add", "src", "10.0.0.0/24", "dst", "10.1.0.0/24",
			"dir", "fwd", "tmpl", "src", "192.168.70.1", "dst", "192.168.70.2", "proto", "esp", "reqid", "1", "mode", "tunnel",
			"offload", "packet", "dev", devA)
	})
	step(t, "sa-budget", func(t *testing.T) {
		old := strings.TrimSpace(run(t, "cat", "/sys/module/nicmodel/parameters/sa_budget"))
		run(t, "sh", "-c", "echo 2 > /sys/module/nicmodel/parameters/sa_budget")
		defer run(t, "sh", "-c", "echo "+old+" > /sys/module/nicmodel/parameters/sa_budget")
		run(t, ip, sa("0x20", gcm...)...)
		run(t, ip, sa("0x21", gcm...)...)
		refuse(t, "SA table is full", sa("0x22", gcm...)...)
		run(t, ip, "-n", nsA, "xfrm", "state", "flush")
	})
	// Crypto offload meets the same algorithm checks and the same SA
	// table; mlx5 keeps it apart from tc only in packet mode.
	crypto := func(spi string, extra ...string) []string {
		a := []string{"-n", nsA, "xfrm", "state", "add", "src", "192.168.70.1", "dst", "192.168.70.2", "proto", "esp",
			"spi", spi, "mode", "tunnel"}
		return append(append(a, extra...), "offload", "crypto", "dev", devA, "dir", "out")
	}
	step(t, "crypto-icv-96", func(t *testing.T) {
		refuse(t, "ICV length other than 128bit", crypto("0x40", "aead", "rfc4106(gcm(aes))", nmKeyAB, "96")...)
	})
	step(t, "crypto-cbc-hmac", func(t *testing.T) {
		refuse(t, "Cannot offload authenticated xfrm states", crypto("0x41",
			"enc", "cbc(aes)", "0x000102030405060708090a0b0c0d0e0f", "auth", "hmac(sha256)", nmKeyAB)...)
	})
	step(t, "crypto-sa-budget", func(t *testing.T) {
		old := strings.TrimSpace(run(t, "cat", "/sys/module/nicmodel/parameters/sa_budget"))
		run(t, "sh", "-c", "echo 2 > /sys/module/nicmodel/parameters/sa_budget")
		defer run(t, "sh", "-c", "echo "+old+" > /sys/module/nicmodel/parameters/sa_budget")
		run(t, ip, sa("0x42", gcm...)...)
		run(t, ip, crypto("0x43", gcm...)...)
		refuse(t, "SA table is full", crypto("0x44", gcm...)...)
		run(t, ip, "-n", nsA, "xfrm", "state", "flush")
	})
	step(t, "ipsec-then-tc-ebusy", func(t *testing.T) {
		run(t, ip, sa("0x30", gcm...)...)
		run(t, "tc", "-n", nsA, "qdisc", "add", "dev", devA, "clsact")
		out, err := try("tc", "-n", nsA, "filter", "add", "dev", devA, "ingress", "protocol", "ip", "flower", "skip_sw", "action", "drop")
		if err == nil || !strings.Contains(out, "while IPsec offload is active") {
			t.Fatalf("tc skip_sw rule on a port with an offloaded SA: err %v:\n%s", err, out)
		}
		run(t, ip, "-n", nsA, "xfrm", "state", "flush")
	})
	step(t, "tc-then-ipsec-ebusy", func(t *testing.T) {
		run(t, "tc", "-n", nsA, "filter", "add", "dev", devA, "ingress", "protocol", "ip", "flower", "skip_sw", "action", "drop")
		refuse(t, "while tc rules are offloaded", sa("0x31", gcm...)...)
		// mlx5 blocks tc only against packet offload.
		run(t, ip, crypto("0x32", gcm...)...)
		run(t, "tc", "-n", nsA, "filter", "del", "dev", devA, "ingress")
		run(t, ip, sa("0x31", gcm...)...)
	})
}

// TestNicmodelOffloadProbe: doctor's offload probe (xfrm.ProbeOffload)
// meets a device that does packet and crypto offload for real: every
// combination must be accepted, and doctor says so (it failed the port,
// "refused every crypto-offload SA", while the model declined them). Then the model is made to decline crypto
// offload with EOPNOTSUPP (crypto_offload=0), on which the kernel keeps
// the SA in software and reports success: the probe must read the
// installed SA to see that (it reported such crypto offload as accepted
// before it did).
func TestNicmodelOffloadProbe(t *testing.T) {
	l := newLab(t)
	nsA, nsB := l.netns(t), l.netns(t)
	devA, _ := l.nicPair(t, nsA, nsB)
	probe := func() xfrm.OffloadProbe {
		var p xfrm.OffloadProbe
		var err error
		inNetns(t, nsA, func() { p, err = xfrm.ProbeOffload(devA) })
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := probe()
	for _, off := range []string{"packet", "crypto"} {
		for _, mode := range []string{"transport", "tunnel"} {
			for _, dir := range []string{"out", "in"} {
				if r := p.Caps[xfrm.ProbeCap(off, mode, dir)]; r != "" {
					t.Errorf("%s %s %s refused by the model: %s", off, mode, dir, r)
				}
			}
		}
	}
	// doctor's verdict on the same port: a device that offloads both.
	r, _ := doctor(t, nsA, "--check", "offload-probe")
	wantVerdict(t, result(t, r, "offload-probe", devA), diag.OK, "crypto- and packet-offload SAs accepted in both modes and directions")
	const param = "/sys/module/nicmodel/parameters/crypto_offload"
	run(t, "sh", "-c", "echo 0 > "+param)
	l.undo("sh", "-c", "echo 1 > "+param)
	if p := probe(); !strings.Contains(p.Crypto, "declined by the device") || p.Packet != "" {
		t.Errorf("probe on a model that declines crypto offload: crypto %q, packet %q; want crypto declined, packet accepted", p.Crypto, p.Packet)
	}
}
