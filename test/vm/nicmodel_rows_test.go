// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"sluice/internal/testutil"
)

// TestNicmodelCryptoRXDropsFailures is row 8 of issue 31's table: mlx5's
// crypto offload drops a bad ICV or trailer in the device (ipsec_fs.c
// rx_add_rule_drop_auth_trailer) and reports CRYPTO_SUCCESS for what it
// hands up (ipsec_rxtx.c); the failures reach the kernel's counters only
// through update_stats (ipsec.c mlx5e_xfrm_update_stats), which an SA dump
// or a read of /proc/net/xfrm_stat triggers. Under kernel-xfrm the model
// hands the frame up marked failed and the kernel counts and drops it.
// B sends under another key than A's crypto-offloaded IN SA holds; a
// capture on A's port (AF_PACKET, the stack's first look) sees the failed
// frames only under kernel-xfrm, and the kernel's counters agree under
// both.
func TestNicmodelCryptoRXDropsFailures(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	for _, prof := range []string{testutil.ProfileKernelXFRM, testutil.ProfileMlx5_612} {
		t.Run(prof, func(t *testing.T) {
			testutil.UseNicmodelProfile(t, prof)
			h := l.newNMHosts(t, false, true)
			h.install(t, ip, nmKeys().wrongKeys().cryptoMode())
			stack := testutil.StartWireOracle(t, h.nsA, h.devA)
			m, st0, x0 := stack.Drain(t), ethStats(t, h.nsA, h.devA), xfrmStat(t, h.nsA)
			const n = 3
			_, _ = try("ip", "netns", "exec", h.nsB, "ping", "-c", fmt.Sprint(n), "-i", "0.2", "-W", "1", "-I", h.innerB, h.innerA)
			d := statDelta(st0, ethStats(t, h.nsA, h.devA), "rx_ipsec_crypto_auth_fail", "rx_ipsec_crypto_packets")
			if d["rx_ipsec_crypto_auth_fail"] < n || d["rx_ipsec_crypto_packets"] != 0 {
				t.Errorf("model: %v; want >= %d ICV failures and no success", d, n)
			}
			seen := 0
			for _, f := range stack.Frames(t, m) {
				if f.Class == testutil.ESP && f.SPI == 0x2001 {
					seen++
				}
			}
			hwDrop := prof != testutil.ProfileKernelXFRM
			if hwDrop && seen != 0 || !hwDrop && seen < n {
				t.Errorf("the stack saw %d of B's %d ESP frames that failed the ICV; want %s", seen, n,
					map[bool]string{true: "0: the device drops them (mlx5)", false: "all: the model hands them up marked failed"}[hwDrop])
			}
			// The kernel's counters hold the failures under both, the
			// device's through update_stats (the read itself triggers it).
			if p, failed, out := saStats(t, h.nsA, h.linkB, h.linkA, "0x2001"); failed < n || p != 0 {
				t.Errorf("A's SA: %d integrity failures, %d packets; want >= %d and 0:\n%s", failed, p, n, out)
			}
			if dx := xfrmStat(t, h.nsA)["XfrmInStateProtoError"] - x0["XfrmInStateProtoError"]; dx < n {
				t.Errorf("XfrmInStateProtoError rose by %d, want >= %d", dx, n)
			}
			t.Logf("%s: the stack saw %d failed frames; model %v", prof, seen, d)
		})
	}
}

// xfrmStat reads /proc/net/xfrm_stat in ns.
func xfrmStat(t *testing.T, ns string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, line := range strings.Split(nsRun(t, ns, "cat", "/proc/net/xfrm_stat"), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			out[f[0]], _ = strconv.ParseUint(f[1], 10, 64)
		}
	}
	return out
}

// TestNicmodelNATTPacketOffload is row 9: mlx5 takes UDP-encapsulated ESP
// (NAT-T, RFC 3948) for packet offload, transport mode only
// (ipsec.c mlx5e_xfrm_validate_state, with MLX5_IPSEC_CAP_ESPINUDP; the
// same in 6.12 and 7.3), adding the UDP header on TX and matching the SPI
// inside UDP on RX (ipsec_fs.c setup_pkt_transport_reformat,
// setup_fte_spi). A's SAs are packet-offloaded with encap espinudp; B is
// the kernel's software NAT-T, whose UDP socket on 4500 (what IKE opens)
// the test opens. The wire carries ESP in UDP 4500 only, seen on both
// taps; B's kernel decrypts what the model sent and the reverse.
func TestNicmodelNATTPacketOffload(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	testutil.UseNicmodelProfile(t, testutil.ProfileMlx5_612)
	h := l.newNMHosts(t, false, false)
	encap := []string{"encap", "espinudp", "4500", "4500", "0.0.0.0"}
	step(t, "refused as mlx5 refuses: tunnel mode, crypto offload", func(t *testing.T) {
		for _, c := range []struct{ mode, offload, want string }{
			{"tunnel", "packet", "transport mode only"},
			{"transport", "crypto", "packet offload mode only"},
		} {
			out, err := try(ip, "-n", h.nsA, "xfrm", "state", "add", "src", h.linkA, "dst", h.linkB, "proto", "esp", "spi", "0x3001",
				"reqid", "3", "mode", c.mode, "encap", "espinudp", "4500", "4500", "0.0.0.0", "aead", "rfc4106(gcm(aes))", nmKeyAB, "128",
				"offload", c.offload, "dev", h.devA, "dir", "out")
			if err == nil || !strings.Contains(out, c.want) {
				t.Errorf("NAT-T SA in %s mode, offload %s: %v %s; want refused (%q)", c.mode, c.offload, err, out, c.want)
			}
			_, _ = try("ip", "-n", h.nsA, "xfrm", "state", "delete", "src", h.linkA, "dst", h.linkB, "proto", "esp", "spi", "0x3001")
		}
	})
	s := nmKeys()
	s.aOutX, s.aInX, s.bOutX, s.bInX = encap, encap, encap, encap
	h.install(t, ip, s)
	if st := run(t, ip, "-n", h.nsA, "xfrm", "state"); strings.Count(st, "mode packet") != 2 || strings.Count(st, "encap type espinudp") != 2 {
		t.Fatalf("A's SAs are not both packet-offloaded NAT-T SAs:\n%s", st)
	}
	natTSocket(t, h.nsB)
	wireA, wireB := testutil.NicWireOracle(t, h.nsA, h.devA), testutil.NicWireOracle(t, h.nsB, h.devB)
	mA, mB, st0 := wireA.Drain(t), wireB.Drain(t), ethStats(t, h.nsA, h.devA)
	const n = 5
	if out, ok := h.ping(t, n); !ok {
		t.Errorf("ping over NAT-T, model packet offload <-> kernel ESP in UDP:\n%s\nA: %v\nB: %v\nB's xfrm_stat: %v\nB's snmp:\n%s\nB's sockets:\n%s\nB's tap: %v", out,
			ethStats(t, h.nsA, h.devA), ethStats(t, h.nsB, h.devB), xfrmStat(t, h.nsB),
			nsRun(t, h.nsB, "grep", "-E", "^(Udp|Ip):", "/proc/net/snmp"), nsRun(t, h.nsB, "ss", "-uanp"), wireB.Frames(t, mB))
	}
	d := statDelta(st0, ethStats(t, h.nsA, h.devA), "tx_ipsec_packets", "rx_ipsec_packets", "tx_cleartext_packets")
	if d["tx_ipsec_packets"] < n || d["rx_ipsec_packets"] < n {
		t.Errorf("model counters: %v, want >= %d encrypted and decrypted", d, n)
	}
	for _, w := range []struct {
		name string
		o    *testutil.WireOracle
		m    testutil.Mark
	}{{"B's tap (from A's model)", wireB, mB}, {"A's tap (from B's kernel)", wireA, mA}} {
		udp := 0
		for _, f := range w.o.Frames(t, w.m) {
			switch {
			case f.Class == testutil.ESP && f.Proto == unix.IPPROTO_UDP:
				udp++
			case f.Class != testutil.LinkControl:
				t.Errorf("%s: %s, want ESP in UDP only", w.name, f)
			}
		}
		if udp < n {
			t.Errorf("%s: %d ESP-in-UDP frames, want >= %d", w.name, udp, n)
		}
	}
	if p, failed, out := saStats(t, h.nsB, h.linkA, h.linkB, "0x1001"); p < n || failed != 0 {
		t.Errorf("B's software SA A->B: %d packets, %d integrity failures, want >= %d, 0:\n%s", p, failed, n, out)
	}
}

// natTSocket opens, in ns, the UDP socket on 4500 with UDP_ENCAP_ESPINUDP
// that an IKE daemon opens: the kernel hands software NAT-T ESP to xfrm
// only through such a socket. Like charon's, it carries an inbound bypass
// policy (IP_XFRM_POLICY, ALLOW without a template): UDP checks the
// socket's packets against the IN policies before it decapsulates them
// (udp_queue_rcv_one_skb), and the host-to-host policy selects them.
func natTSocket(t *testing.T, ns string) {
	t.Helper()
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var fd int
	testutil.InNetnsHandle(t, h, func() {
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0); err != nil {
			return
		}
		if err = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_ENCAP, unix.UDP_ENCAP_ESPINUDP); err != nil {
			return
		}
		if err = unix.SetsockoptString(fd, unix.IPPROTO_IP, unix.IP_XFRM_POLICY, string(bypassIn())); err != nil {
			return
		}
		err = unix.Bind(fd, &unix.SockaddrInet4{Port: 4500})
	})
	if err != nil {
		t.Fatalf("the NAT-T socket in %s: %v", ns, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
}

// bypassIn is a struct xfrm_userpolicy_info (168 bytes on amd64) for an
// IPv4 socket: any selector, dir in (0), action allow (0), no limits.
func bypassIn() []byte {
	b := make([]byte, 168)
	binary.LittleEndian.PutUint16(b[40:], unix.AF_INET) // sel.family, after daddr, saddr and the ports
	for i := range 4 {                                  // lft: byte and packet limits infinite
		binary.LittleEndian.PutUint64(b[56+8*i:], ^uint64(0))
	}
	return b
}
