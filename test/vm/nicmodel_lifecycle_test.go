// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"os"
	"strings"
	"testing"

	"sluice/internal/testutil"
)

// kernelComplaints are dmesg lines that mean the model broke the kernel.
var kernelComplaints = []string{"BUG:", "WARNING:", "Oops", "refcount_t:", "general protection",
	"list_del corruption", "list_add corruption", "unregister_netdevice: waiting", "KASAN", "use-after-free"}

// dmesgSince returns the kernel log lines after the first n.
func dmesgSince(t *testing.T, n int) []string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(run(t, "dmesg"), "\n"), "\n")
	if n > len(lines) {
		return lines // the ring buffer wrapped: all of it
	}
	return lines[n:]
}

// TestNicmodelUnloadLoop loads and unloads the model three times with
// everything it can hold installed: packet-offloaded SAs (one with packet
// limits that the traffic crosses, so the expire work runs) and policies,
// a crypto-offloaded SA, hardware flower rules on another pair, a wire
// tap. rmmod must return (no reference held on a port or the module), the
// kernel must flush the offloaded SAs with the ports, and the kernel log
// must stay clean.
func TestNicmodelUnloadLoop(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	if os.Getenv("SLUICE_NICMODEL") == "" {
		t.Fatal("SLUICE_NICMODEL unset")
	}
	base := len(dmesgSince(t, 0))
	for i := 0; i < 3; i++ {
		testutil.LoadNicmodel(t)
		h := l.newNMHosts(t, false, true)
		s := nmKeys()
		s.aOutX = []string{"limit", "packet-soft", "2", "limit", "packet-hard", "1000"}
		h.install(t, ip, s)
		run(t, ip, "-n", h.nsA, "xfrm", "state", "add", "src", h.linkA, "dst", "192.168.70.9", "proto", "esp", "spi", "0x3001",
			"reqid", "3", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", nmKeyXX, "128", "offload", "crypto", "dev", h.devA, "dir", "out")
		nsC, nsD := l.netns(t), l.netns(t)
		fc, _ := l.nicPairNamed(t, nsC, "fl0", nsD, "fl1")
		run(t, "tc", "-n", nsC, "qdisc", "add", "dev", fc, "ingress")
		run(t, "tc", "-n", nsC, "filter", "add", "dev", fc, "ingress", "protocol", "ip", "flower", "skip_sw",
			"dst_ip", "192.0.2.1", "action", "drop")
		testutil.NicTap(t, h.nsB, h.devB)
		if out, ok := h.ping(t, 4); !ok {
			t.Fatalf("round %d: ping before unloading:\n%s", i, out)
		}
		if out, err := try("rmmod", "nicmodel"); err != nil {
			t.Fatalf("round %d: rmmod nicmodel: %v\n%s", i, err, out)
		}
		if _, err := os.Stat("/sys/module/nicmodel"); err == nil {
			t.Fatalf("round %d: nicmodel still loaded after rmmod", i)
		}
		if st := run(t, "ip", "-n", h.nsA, "xfrm", "state"); strings.Contains(st, "offload") {
			t.Errorf("round %d: offloaded SAs left after their device went:\n%s", i, st)
		}
	}
	testutil.LoadNicmodel(t)
	for _, line := range dmesgSince(t, base) {
		for _, c := range kernelComplaints {
			if strings.Contains(line, c) {
				t.Errorf("kernel log: %s", line)
			}
		}
	}
}

// TestNicmodelBondSA: an SA added on a bond reaches the port's driver
// through bond_ipsec_add_sa, which in 6.12 calls it while xso.real_dev is
// still the bond (it names the port after the call). The model must not
// take the bond's private data for a port's (it did: netdev_priv(xso.dev)
// wrote its SA accounting into struct bonding and reported the SA
// offloaded): it declines, and the kernel keeps the crypto SA in
// software. The bond and its ports work on. Since 6.16 the xfrm core
// passes the driver the device (bond_ipsec_add_sa: the active port), so
// there the SA is offloaded on a0 and follows the failover to a1.
func TestNicmodelBondSA(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	nsA, nsB := l.netns(t), l.netns(t)
	base := len(dmesgSince(t, 0))
	l.nicPairNamed(t, nsA, "a0", nsB, "b0")
	l.nicPairNamed(t, nsA, "a1", nsB, "b1")
	run(t, "ip", "-n", nsA, "link", "add", "bond0", "type", "bond", "mode", "active-backup", "miimon", "100", "primary", "a0")
	for _, p := range []string{"a0", "a1"} {
		run(t, "ip", "-n", nsA, "link", "set", p, "down")
		run(t, "ip", "-n", nsA, "link", "set", p, "master", "bond0")
	}
	run(t, "ip", "-n", nsA, "link", "set", "bond0", "up")
	waitActive(t, nsA, "a0")
	run(t, ip, "-n", nsA, "xfrm", "state", "add", "src", "192.168.70.1", "dst", "192.168.70.2", "proto", "esp", "spi", "0x1001",
		"reqid", "1", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", nmKeyAB, "128", "offload", "crypto", "dev", "bond0", "dir", "out")
	// The bond's SA on its ports: none before 6.16, else on the active one.
	viaBond := testutil.KernelAtLeast(t, 6, 16)
	want := map[string]uint64{"a0": 0, "a1": 0}
	if st := run(t, ip, "-n", nsA, "xfrm", "state"); viaBond {
		if !strings.Contains(st, "offload parameters: dev bond0") {
			t.Errorf("6.16+ gives the driver the bond's active port, but the SA is not offloaded through bond0:\n%s", st)
		}
		want["a0"] = 1
	} else if strings.Contains(st, "offload") {
		t.Errorf("the SA is offloaded through bond0, but 6.12 gives the driver no port to put it on:\n%s", st)
	}
	for _, p := range []string{"a0", "a1"} {
		if n := ethStats(t, nsA, p)["ipsec_sa_count"]; n != want[p] {
			t.Errorf("%s holds %d SAs, want %d", p, n, want[p])
		}
	}
	// The bond still fails over and its packet-offload-free ports still
	// take SAs of their own.
	run(t, "ip", "-n", nsB, "link", "set", "b0", "down")
	waitActive(t, nsA, "a1")
	run(t, ip, "-n", nsA, "xfrm", "state", "add", "src", "192.168.70.1", "dst", "192.168.70.3", "proto", "esp", "spi", "0x1002",
		"reqid", "2", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", nmKeyAB, "128", "offload", "crypto", "dev", "a1", "dir", "out")
	// 6.16+: the bond moved its SA from a0 to a1 at the failover.
	want = map[string]uint64{"a0": 0, "a1": 1}
	if viaBond {
		want["a1"] = 2
	}
	for _, p := range []string{"a0", "a1"} {
		if n := ethStats(t, nsA, p)["ipsec_sa_count"]; n != want[p] {
			t.Errorf("%s holds %d SAs after the failover and one SA added on a1, want %d", p, n, want[p])
		}
	}
	run(t, ip, "-n", nsA, "xfrm", "state", "flush")
	for _, line := range dmesgSince(t, base) {
		for _, c := range kernelComplaints {
			if strings.Contains(line, c) {
				t.Errorf("kernel log: %s", line)
			}
		}
	}
}
