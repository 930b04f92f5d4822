// SPDX-License-Identifier: Apache-2.0

package mtu

import "testing"

// The SA MTUs below are xfrm_state_mtu's. The two marked "kernel" were
// read from the ICMP errors of Linux 6.12.95 (the test VM; ../shared/facts
// and test/vm's post-SA test re-measure them); the others follow the same
// formula, spelled out: ((mtu - header_len - icv - net_adj) &^ (align-1))
// + net_adj - 2.
func TestSAMTU(t *testing.T) {
	gcm := func(icvBits int) Transform { return Transform{AEAD: "rfc4106(gcm(aes))", ICVBits: icvBits} }
	cbc := Transform{Crypt: "cbc(aes)", Auth: "hmac(sha256)", AuthTruncBits: 128}
	for _, tc := range []struct {
		name string
		tr   Transform
		sa   SA
		mtu  int
		want int
	}{
		// kernel: 1500 - (8+8+20) - 16 = 1448, &^3, -2
		{"tunnel v4 gcm128", gcm(128), SA{Mode: SATunnel}, 1500, 1446},
		// kernel: 1500 - (8+8+40) - 16 = 1428, -2
		{"tunnel v6 gcm128", gcm(128), SA{Mode: SATunnel, OuterIPv6: true}, 1500, 1426},
		// ICV 8 and 12: 1456 &^3 - 2, 1452 - 2
		{"tunnel v4 gcm64", gcm(64), SA{Mode: SATunnel}, 1500, 1454},
		{"tunnel v4 gcm96", gcm(96), SA{Mode: SATunnel}, 1500, 1450},
		// ESN changes nothing on the wire
		{"tunnel v4 gcm128 esn", gcm(128), SA{Mode: SATunnel, ESN: true}, 1500, 1446},
		// NAT-T: +8 UDP: 1440 - 2
		{"tunnel v4 gcm128 natt", gcm(128), SA{Mode: SATunnel, Encap: SAEncapUDP}, 1500, 1438},
		{"tunnel v6 gcm128 natt", gcm(128), SA{Mode: SATunnel, OuterIPv6: true, Encap: SAEncapUDP}, 1500, 1418},
		// transport v4: net_adj 20: 1500-16-16-20 = 1448, +20-2
		{"transport v4 gcm128", gcm(128), SA{Mode: SATransport}, 1500, 1466},
		{"transport v6 gcm128", gcm(128), SA{Mode: SATransport, OuterIPv6: true}, 1500, 1466},
		// CBC: 1500-(8+16+20)-16 = 1440, &^15 = 1440, -2
		{"tunnel v4 cbc-sha256", cbc, SA{Mode: SATunnel}, 1500, 1438},
		// 1499: 1439 &^15 = 1424, -2 (the block rounds down)
		{"tunnel v4 cbc-sha256 odd mtu", cbc, SA{Mode: SATunnel}, 1499, 1422},
		// a 1280 IPv6 route: 1280-56-16 = 1208, -2
		{"tunnel v6 gcm128 at 1280", gcm(128), SA{Mode: SATunnel, OuterIPv6: true}, 1280, 1206},
		// chacha20-poly1305: like gcm128
		{"tunnel v4 chacha", Transform{AEAD: "rfc7539esp(chacha20,poly1305)", ICVBits: 128}, SA{Mode: SATunnel}, 9000, 8946},
		// 60 leaves 8 bytes, 54 leaves 2: nothing fits (the kernel says 1)
		{"small", gcm(128), SA{Mode: SATunnel}, 60, 6},
		{"tiny", gcm(128), SA{Mode: SATunnel}, 54, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iv, block, icv, err := tc.tr.Sizes()
			if err != nil {
				t.Fatal(err)
			}
			sa := tc.sa
			sa.IV, sa.Block, sa.ICV = iv, block, icv
			if got := sa.MTU(tc.mtu); got != tc.want {
				t.Fatalf("MTU(%d) = %d, want %d (header %d, ICV %d)", tc.mtu, got, tc.want, sa.HeaderLen(), icv)
			}
		})
	}
}

// The SA MTU and the calculator agree: the largest packet an SA carries
// is the largest overlay packet of the equivalent Stack (no encapsulation,
// ESP tunnel mode) that fits the same underlay MTU.
func TestSAMTUMatchesStack(t *testing.T) {
	for _, name := range CipherNames() {
		c := Ciphers[name]
		for _, v6 := range []bool{false, true} {
			for _, under := range []int{1280, 1500, 1501, 1502, 1503, 9000} {
				s := Stack{Encap: EncapNone, ESP: ESPTunnel, Cipher: c, OuterIPv6: v6, InnerIPv6: v6}
				sa := SA{Mode: SATunnel, OuterIPv6: v6, IV: c.IV, Block: c.Align, ICV: c.ICV}
				want := s.MaxOverlay(under, s.UnderlayLen)
				if want == 0 {
					continue // below the calculator's minimum overlay (1280 for IPv6)
				}
				if got := sa.MTU(under); got != want {
					t.Errorf("%s v6=%v underlay %d: SA.MTU %d, Stack.MaxOverlay %d", name, v6, under, got, want)
				}
			}
		}
	}
}

func TestTransformSizesUnknown(t *testing.T) {
	for _, tr := range []Transform{{AEAD: "gcm(aes)", ICVBits: 128}, {Crypt: "cbc(foo)"}, {Crypt: "cbc(aes)", Auth: "hmac(bar)"}} {
		if _, _, _, err := tr.Sizes(); err == nil {
			t.Errorf("%+v: no error", tr)
		}
	}
}
