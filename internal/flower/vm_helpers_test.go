// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"testing"
	"time"

	"sluice/internal/fastpath"
	"sluice/internal/flower"
	"sluice/internal/kernel/tcflower"
	"sluice/internal/kernel/xfrm"
)

// sendUDP sends n datagrams from inside ns to dst:port with the given TTL.
func sendUDP(t *testing.T, ns string, dst netip.Addr, port, ttl, n int) {
	t.Helper()
	sendDatagrams(t, ns, dst, port, ttl, []byte("sluice flower test"), n)
}

// sendSizedUDP sends n datagrams of l3 bytes (IPv4) from ns to dst:port,
// with the default TTL.
func sendSizedUDP(t *testing.T, ns string, dst netip.Addr, port, l3, n int) {
	t.Helper()
	sendDatagrams(t, ns, dst, port, 0, make([]byte, l3-28), n)
}

// sendDatagrams sends payload n times from inside ns to dst:port, 50 ms
// apart; ttl > 0 sets the TTL (hop limit), 0 leaves the default.
func sendDatagrams(t *testing.T, ns string, dst netip.Addr, port, ttl int, payload []byte, n int) {
	t.Helper()
	inNetns(t, ns, func() {
		c, err := net.Dial("udp", net.JoinHostPort(dst.String(), strconv.Itoa(port)))
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		if ttl > 0 {
			rc, _ := c.(*net.UDPConn).SyscallConn()
			rc.Control(func(fd uintptr) {
				if dst.Is4() {
					syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TTL, ttl)
				} else {
					syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IPV6, syscall.IPV6_UNICAST_HOPS, ttl)
				}
			})
		}
		for i := 0; i < n; i++ {
			c.Write(payload)
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// openTC opens a tc flower socket in ns, closed when the test ends.
func openTC(t *testing.T, ns string) *tcflower.Socket {
	t.Helper()
	var fs *tcflower.Socket
	inNetns(t, ns, func() {
		var err error
		if fs, err = tcflower.Open(); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { fs.Close() })
	return fs
}

// staticRouter is the FIB the test set up, as the flower tier's Router.
type staticRouter map[netip.Prefix]flower.NextHop

func (r staticRouter) Route(dst netip.Prefix) (flower.NextHop, string) {
	for p, nh := range r {
		if p.Bits() <= dst.Bits() && p.Contains(dst.Addr()) {
			return nh, ""
		}
	}
	return flower.NextHop{}, "no route"
}

// pktCount returns the packets a tc filter's actions counted ("Sent N
// bytes M pkt") in `tc -s filter show` output for one pref.
func pktCount(t *testing.T, ns, dev, pref string) int {
	t.Helper()
	out := run(t, "tc", "-n", ns, "-s", "filter", "show", "dev", dev, "ingress", "pref", pref)
	m := sentPktRe.FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// Source implements flower.Router: the lab's sources are fine.
func (r staticRouter) Source(netip.Prefix, int) ([]netip.Addr, string) { return nil, "" }

// withRouteMTU gives every SA of s strongSwan's esp=aes128gcm16 (unless it
// names its algorithm) and a 1500-byte route, as the mirror would: SA MTU
// 1446 over IPv4, 1426 over IPv6.
func withRouteMTU(s fastpath.Snapshot) fastpath.Snapshot {
	s.States = append([]xfrm.State(nil), s.States...)
	s.RouteMTU = map[fastpath.Endpoints]int{}
	for i := range s.States {
		if s.States[i].Alg == (xfrm.StateAlg{}) {
			s.States[i].Alg = xfrm.StateAlg{AEAD: "rfc4106(gcm(aes))", ICVBits: 128}
		}
		s.RouteMTU[fastpath.Endpoints{Src: s.States[i].Src, Dst: s.States[i].Dst}] = 1500
	}
	return s
}
