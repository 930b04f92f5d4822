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
	"sluice/internal/kernel/xfrm"
)

// sendUDP sends n datagrams from inside ns to dst:port with the given TTL.
func sendUDP(t *testing.T, ns string, dst netip.Addr, port, ttl, n int) {
	t.Helper()
	inNetns(t, ns, func() {
		c, err := net.Dial("udp", net.JoinHostPort(dst.String(), strconv.Itoa(port)))
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		rc, _ := c.(*net.UDPConn).SyscallConn()
		rc.Control(func(fd uintptr) {
			if dst.Is4() {
				syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TTL, ttl)
			} else {
				syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IPV6, syscall.IPV6_UNICAST_HOPS, ttl)
			}
		})
		for i := 0; i < n; i++ {
			c.Write([]byte("sluice flower test"))
			time.Sleep(50 * time.Millisecond)
		}
	})
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
