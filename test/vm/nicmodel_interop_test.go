// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The model's ESP checked against the kernel's own (esp4/esp6): host A
// has the model's packet offload (SAs and policies `offload packet dev
// nmA`), host B plain software ESP on the other model port, which holds
// no SAs and so passes ESP to B's stack. A ping from A is encrypted by
// the model and decrypted by B's kernel; B's reply is encrypted by B's
// kernel and decrypted by the model.

const (
	nmKeyAB = "0x0102030405060708090a0b0c0d0e0f1011121314"
	nmKeyBA = "0x2122232425262728292a2b2c2d2e2f3031323334"
	nmKeyXX = "0x4142434445464748494a4b4c4d4e4f5051525354"
)

// nmHosts is one interop case: hosts A (nsA) and B (nsB) joined by a
// pair of model ports (devA, devB), and their addressing.
type nmHosts struct {
	nsA, devA, nsB, devB string
	v6, tunnel           bool
	linkA, linkB         string // on the model ports
	innerA, innerB       string // tunnel mode: on lo, routed through the link
	plen                 string // host prefix length
}

// newNMHosts is the set-up every interop case shares: two namespaces, a
// model pair between them, addressed and wired (no SAs yet: install).
func (l *lab) newNMHosts(t *testing.T, v6, tunnel bool) nmHosts {
	t.Helper()
	h := nmHosts{v6: v6, tunnel: tunnel, linkA: "192.168.70.1", linkB: "192.168.70.2",
		innerA: "10.71.0.1", innerB: "10.72.0.1", plen: "32"}
	if v6 {
		h.linkA, h.linkB, h.innerA, h.innerB, h.plen = "fc00:70::1", "fc00:70::2", "fd71::1", "fd72::1", "128"
	}
	h.nsA, h.nsB = l.netns(t), l.netns(t)
	h.devA, h.devB = l.nicPair(t, h.nsA, h.nsB)
	h.wire(t)
	return h
}

// ends are the addresses traffic and policy selectors use.
func (h nmHosts) ends() (string, string) {
	if h.tunnel {
		return h.innerA, h.innerB
	}
	return h.linkA, h.linkB
}

func (h nmHosts) mode() string {
	if h.tunnel {
		return "tunnel"
	}
	return "transport"
}

// wire addresses both namespaces, with permanent neighbours: a
// transport-mode host-to-host policy would also select IPv6 neighbour
// discovery.
func (h nmHosts) wire(t *testing.T) {
	t.Helper()
	nsA, devA, nsB, devB := h.nsA, h.devA, h.nsB, h.devB
	linkPlen := "24"
	if h.v6 {
		linkPlen = "64"
	}
	for _, e := range [][4]string{{nsA, devA, h.linkA, h.innerA}, {nsB, devB, h.linkB, h.innerB}} {
		args := []string{"-n", e[0], "addr", "add", e[2] + "/" + linkPlen, "dev", e[1]}
		if h.v6 {
			args = append(args, "nodad")
		}
		run(t, "ip", args...)
		if h.tunnel {
			args := []string{"-n", e[0], "addr", "add", e[3] + "/" + h.plen, "dev", "lo"}
			if h.v6 {
				args = append(args, "nodad")
			}
			run(t, "ip", args...)
		}
	}
	if h.tunnel {
		run(t, "ip", "-n", nsA, "route", "add", h.innerB+"/"+h.plen, "via", h.linkB, "src", h.innerA)
		run(t, "ip", "-n", nsB, "route", "add", h.innerA+"/"+h.plen, "via", h.linkA, "src", h.innerB)
	}
	run(t, "ip", "-n", nsA, "neigh", "replace", h.linkB, "lladdr", macOf(t, nsB, devB), "dev", devA, "nud", "permanent")
	if h.tunnel {
		// A's own packets into a packet-offloaded tunnel leave through
		// the route to the outer address with the inner destination as
		// next hop (xfrm_output: only forwarded packets take the direct
		// path), so A resolves B's inner address on the link. IPv4's ARP
		// answers for any local address; IPv6's ND does not.
		run(t, "ip", "-n", nsA, "neigh", "replace", h.innerB, "lladdr", macOf(t, nsB, devB), "dev", devA, "nud", "permanent")
	}
	run(t, "ip", "-n", nsB, "neigh", "replace", h.linkA, "lladdr", macOf(t, nsA, devA), "dev", devB, "nud", "permanent")
}

// nmSA describes one SA for `ip xfrm state add`.
type nmSA struct {
	src, dst, spi, reqid, key string
	extra                     []string // flag esn, replay-*, limit ...
}

func (h nmHosts) stateArgs(sa nmSA) []string {
	a := []string{"xfrm", "state", "add", "src", sa.src, "dst", sa.dst, "proto", "esp", "spi", sa.spi,
		"reqid", sa.reqid, "mode", h.mode()}
	a = append(a, sa.extra...)
	return append(a, "aead", "rfc4106(gcm(aes))", sa.key, "128")
}

// nmSetup installs the SAs and policies of both hosts: A offloaded to
// devA, B in software. keyAB/keyBA are what A uses; B's can differ
// (wrong-key cases).
type nmSetup struct {
	keyAB, keyBA     string // A's keys
	bKeyAB, bKeyBA   string // B's keys
	aOutX, aInX      []string
	bOutX, bInX      []string
	skipAOutPolicy   bool
	replayWindowSize string
	// crypto offloads A's SAs in crypto mode (`offload crypto`): the
	// model only encrypts and decrypts; A's policies stay the kernel's.
	crypto bool
}

// nmKeys is the set-up with the same keys on both hosts.
func nmKeys() nmSetup {
	return nmSetup{keyAB: nmKeyAB, keyBA: nmKeyBA, bKeyAB: nmKeyAB, bKeyBA: nmKeyBA}
}

// wrongKeys gives B other keys than A's.
func (s nmSetup) wrongKeys() nmSetup {
	s.bKeyAB, s.bKeyBA = nmKeyXX, nmKeyXX
	return s
}

// cryptoMode offloads A's SAs in crypto mode.
func (s nmSetup) cryptoMode() nmSetup {
	s.crypto = true
	return s
}

// esnWrap starts the sequence numbers 3 below 2^32 both ways: the high
// half must go into the AAD on send and be inferred on receive.
func (s nmSetup) esnWrap() nmSetup {
	s.replayWindowSize = "128"
	out := []string{"flag", "esn", "replay-oseq", "0xfffffffd"}
	in := []string{"flag", "esn", "replay-seq", "0xfffffff8"}
	s.aOutX, s.aInX, s.bInX = out, in, in
	// Without dir out, iproute2 wants a window with esn.
	s.bOutX = append([]string{"replay-window", "128"}, out...)
	return s
}

func (h nmHosts) install(t *testing.T, ip string, s nmSetup) {
	t.Helper()
	nsA, devA, nsB := h.nsA, h.devA, h.nsB
	if s.replayWindowSize == "" {
		s.replayWindowSize = "64"
	}
	rw := []string{"replay-window", s.replayWindowSize}
	mode := "packet"
	if s.crypto {
		mode = "crypto"
	}
	off := func(dir string) []string { return []string{"offload", mode, "dev", devA, "dir", dir} }
	a, b := h.linkA, h.linkB
	// The kernel refuses a replay window on an SA with dir out.
	run(t, ip, append(append([]string{"-n", nsA}, h.stateArgs(nmSA{a, b, "0x1001", "1", s.keyAB, s.aOutX})...), off("out")...)...)
	run(t, ip, append(append([]string{"-n", nsA}, h.stateArgs(nmSA{b, a, "0x2001", "2", s.keyBA, append(s.aInX, rw...)})...), off("in")...)...)
	run(t, ip, append([]string{"-n", nsB}, h.stateArgs(nmSA{a, b, "0x1001", "1", s.bKeyAB, append(s.bInX, rw...)})...)...)
	run(t, ip, append([]string{"-n", nsB}, h.stateArgs(nmSA{b, a, "0x2001", "2", s.bKeyBA, s.bOutX})...)...)

	ea, eb := h.ends()
	sel := func(src, dst string) []string {
		return []string{"src", src + "/" + h.plen, "dst", dst + "/" + h.plen}
	}
	tmpl := func(src, dst, reqid string) []string {
		t := []string{"tmpl"}
		if h.tunnel {
			t = append(t, "src", src, "dst", dst)
		}
		return append(t, "proto", "esp", "reqid", reqid, "mode", h.mode())
	}
	pol := func(ns string, sel []string, dir string, tmpl []string, offload bool) {
		args := append(append([]string{"-n", ns, "xfrm", "policy", "add"}, sel...), "dir", dir)
		args = append(args, tmpl...)
		if offload && !s.crypto {
			args = append(args, "offload", "packet", "dev", devA)
		}
		run(t, ip, args...)
	}
	if !s.skipAOutPolicy {
		pol(nsA, sel(ea, eb), "out", tmpl(a, b, "1"), true)
	}
	pol(nsA, sel(eb, ea), "in", tmpl(b, a, "2"), true)
	pol(nsB, sel(eb, ea), "out", tmpl(b, a, "2"), false)
	pol(nsB, sel(ea, eb), "in", tmpl(a, b, "1"), false)
}

// ping sends n echo requests from A's end to B's and returns the output
// and whether all were answered.
func (h nmHosts) ping(t *testing.T, n int) (string, bool) {
	t.Helper()
	ea, eb := h.ends()
	out, err := try("ip", "netns", "exec", h.nsA, "ping", "-c", fmt.Sprint(n), "-i", "0.2", "-W", "2", "-I", ea, eb)
	return out, err == nil && strings.Contains(out, " 0% packet loss")
}

func TestNicmodelInterop(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	type tc struct {
		name       string
		v6, tunnel bool
		esn        bool
	}
	cases := []tc{
		{"ipv4-tunnel", false, true, false},
		{"ipv4-transport", false, false, false},
		{"ipv6-tunnel", true, true, false},
		{"ipv6-transport", true, false, false},
		// Sequence numbers start 3 below 2^32 both ways: the model must
		// carry the high half in the AAD, and infer it on receive, as
		// esp4 does.
		{"ipv4-tunnel-esn-wrap", false, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := l.newNMHosts(t, c.v6, c.tunnel)
			s := nmKeys()
			if c.esn {
				s = s.esnWrap()
			}
			h.install(t, ip, s)

			before := ethStats(t, h.nsA, h.devA)
			const n = 6
			if out, ok := h.ping(t, n); !ok {
				t.Fatalf("ping through model ESP <-> kernel ESP failed:\n%s\nA: %v\nB: %v\n%s", out,
					ethStats(t, h.nsA, h.devA), ethStats(t, h.nsB, h.devB), run(t, ip, "-n", h.nsA, "-s", "xfrm", "state"))
			}
			d := statDelta(before, ethStats(t, h.nsA, h.devA), "tx_ipsec_packets", "rx_ipsec_packets", "rx_ipsec_drop_auth")
			if d["tx_ipsec_packets"] < n || d["rx_ipsec_packets"] < n {
				t.Errorf("model counters: %v, want >= %d encrypted and decrypted", d, n)
			}
			// B's kernel decrypted what the model encrypted, and the
			// model's SAs report their traffic through update_stats.
			if p, failed, out := saStats(t, h.nsB, h.linkA, h.linkB, "0x1001"); p < n || failed != 0 {
				t.Errorf("B's software SA A->B: %d packets, %d integrity failures, want >= %d, 0:\n%s", p, failed, n, out)
			}
			for _, sa := range [][3]string{{h.linkA, h.linkB, "0x1001"}, {h.linkB, h.linkA, "0x2001"}} {
				if p, _, out := saStats(t, h.nsA, sa[0], sa[1], sa[2]); p < n {
					t.Errorf("A's offloaded SA %s: %d packets in ip -s xfrm state, want >= %d:\n%s", sa[2], p, n, out)
				}
			}
		})
	}
}

// TestNicmodelWrongKey: the model refuses ESP whose ICV does not verify
// (counted, dropped), and the kernel refuses the model's ESP under a
// different key: so the model does encrypt with the SA's key.
func TestNicmodelWrongKey(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	h := l.newNMHosts(t, false, true)
	h.install(t, ip, nmKeys().wrongKeys())
	if out, ok := h.ping(t, 3); ok {
		t.Fatalf("ping succeeded with different keys on the two ends:\n%s", out)
	}
	if _, failed, out := saStats(t, h.nsB, h.linkA, h.linkB, "0x1001"); failed < 3 {
		t.Errorf("B's kernel: %d integrity failures on the model's ESP under another key, want >= 3:\n%s", failed, out)
	}
	// B's kernel drops A's requests, so A gets no reply to check: send
	// B's own ESP (B pings A) under B's key.
	b, a := h.innerB, h.innerA
	_, _ = try("ip", "netns", "exec", h.nsB, "ping", "-c", "3", "-i", "0.2", "-W", "1", "-I", b, a)
	if st := ethStats(t, h.nsA, h.devA); st["rx_ipsec_drop_auth"] < 3 || st["rx_ipsec_packets"] != 0 {
		t.Errorf("model: rx_ipsec_drop_auth %d, rx_ipsec_packets %d; want >= 3 and 0", st["rx_ipsec_drop_auth"], st["rx_ipsec_packets"])
	}
}

// replayScript, run in B's namespace, waits for the first ESP frame B
// sends on dev and sends that same frame twice more.
const replayScript = `
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((sys.argv[1], 0))
s.settimeout(20)
print("ready", flush=True)
while True:
    f, addr = s.recvfrom(65535)
    if addr[2] == socket.PACKET_OUTGOING and f[12:14] == b"\x08\x00" and f[23] == 50:
        break
s.send(f)
s.send(f)
print("replayed", len(f))
`

// TestNicmodelReplay: an ESP frame sent again is dropped by the model's
// replay window and counted. With ESN: mlx5 keeps a replay window only
// for ESN SAs (row 7 of kmod/nicmodel/README.md; the non-ESN case is
// TestNicmodelProfileSequence's).
func TestNicmodelReplay(t *testing.T) {
	l := newLab(t)
	ip := ipPacket(t)
	h := l.newNMHosts(t, false, true)
	s := nmKeys()
	s.aInX = []string{"flag", "esn"}
	s.bOutX = []string{"replay-window", "64", "flag", "esn"}
	h.install(t, ip, s)
	st := replayFirstReply(t, h)
	if st["rx_ipsec_drop_replay"] != 2 || st["rx_ipsec_packets"] != 3 {
		t.Errorf("model after 3 replies and 2 replays of the first: rx_ipsec_drop_replay %d, rx_ipsec_packets %d; want 2 and 3",
			st["rx_ipsec_drop_replay"], st["rx_ipsec_packets"])
	}
}

// startReplay runs replayScript on B's port; the returned function waits
// for it to have replayed.
func startReplay(t *testing.T, h nmHosts) func() {
	t.Helper()
	script := filepath.Join(t.TempDir(), "replay.py")
	if err := os.WriteFile(script, []byte(replayScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", h.nsB, "python3", script, h.devB)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("replay script did not start: %q %v", line, err)
	}
	return func() {
		rest, _ := io.ReadAll(r)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("replay script: %v\n%s", err, rest)
		}
	}
}
