// SPDX-License-Identifier: Apache-2.0

package mtu

import (
	"testing"
)

func gcm128() Cipher { return Ciphers["aes-gcm-128"] }

// seed000 is VXLAN over ESP transport, rfc4106 128, IPv4 (the ConnectX-6 SR-IOV guide).
func seed000() Stack {
	return Stack{Encap: EncapVXLAN, ESP: ESPTransport, Cipher: gcm128()}
}

// seed001 is Geneve over ESP transport (crypto offload on the bond),
// rfc4106 128, IPv4 (the VM single-flow guide).
func seed001() Stack {
	return Stack{Encap: EncapGeneve, ESP: ESPTransport, Cipher: gcm128()}
}

// Every figure below was computed by hand, layer by layer; the comments
// show the sum.
func TestOverheadRanges(t *testing.T) {
	cbc := Ciphers["aes-cbc-hmac-sha256"]
	for _, tc := range []struct {
		name   string
		s      Stack
		lo, hi int
	}{
		// 20 IPv4 + 8 ESP + 8 IV + 0-3 pad + 2 trailer + 16 ICV
		{"IPv4 tunnel-mode ESP, AES-GCM", Stack{Encap: EncapNone, ESP: ESPTunnel, Cipher: gcm128()}, 54, 57},
		// 20 + 8 + 16 IV + 0-15 pad + 2 + 16 ICV (Cilium's 77-byte budget)
		{"IPv4 tunnel-mode ESP, AES-CBC + HMAC-SHA256-128", Stack{Encap: EncapNone, ESP: ESPTunnel, Cipher: cbc}, 62, 77},
		// 40 IPv6 + 8 + 8 + 0-3 + 2 + 16
		{"IPv6 tunnel-mode ESP, AES-GCM", Stack{Encap: EncapNone, ESP: ESPTunnel, Cipher: gcm128(), OuterIPv6: true}, 74, 77},
		// 40 + 8 + 16 + 0-15 + 2 + 16
		{"IPv6 tunnel-mode ESP, AES-CBC + HMAC-SHA256-128", Stack{Encap: EncapNone, ESP: ESPTunnel, Cipher: cbc, OuterIPv6: true}, 82, 97},
		// 8 + 8 + 0-3 + 2 + 16: transport mode keeps the packet's own header
		{"IPv4 transport-mode ESP, AES-GCM", Stack{Encap: EncapNone, ESP: ESPTransport, Cipher: gcm128()}, 34, 37},
		// 20 IPv4 + 8 UDP + 8 VXLAN + 14 Ethernet: the classic 50
		{"VXLAN over IPv4, no ESP", Stack{Encap: EncapVXLAN, ESP: ESPNone}, 50, 50},
		{"VXLAN over IPv6, no ESP", Stack{Encap: EncapVXLAN, ESP: ESPNone, OuterIPv6: true}, 70, 70},
		{"Geneve over IPv4 with 8 option bytes, no ESP", Stack{Encap: EncapGeneve, GeneveOptions: 8, ESP: ESPNone}, 58, 58},
		// 20 + 8 ESP + 8 IV + 8 UDP + 8 VXLAN + 14 Ethernet + 0-3 + 2 + 16
		{"VXLAN over IPv4 ESP transport, AES-GCM (the ConnectX-6 SR-IOV guide)", seed000(), 84, 87},
		{"VXLAN over IPv6 ESP transport, AES-GCM", Stack{Encap: EncapVXLAN, ESP: ESPTransport, Cipher: gcm128(), OuterIPv6: true}, 104, 107},
		// 20 outer + 8 + 8 + 20 tunnelled VTEP header + 8 + 8 + 14 + 0-3 + 2 + 16
		{"VXLAN over IPv4 ESP tunnel, AES-GCM", Stack{Encap: EncapVXLAN, ESP: ESPTunnel, Cipher: gcm128()}, 104, 107},
		{"Geneve over IPv4 ESP transport, AES-GCM (the VM single-flow guide)", seed001(), 84, 87},
		{"VXLAN with inner VLAN over IPv4 ESP transport", Stack{Encap: EncapVXLAN, InnerVLAN: true, ESP: ESPTransport, Cipher: gcm128()}, 88, 91},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi := tc.s.Overhead()
			if lo != tc.lo || hi != tc.hi {
				t.Fatalf("overhead %d-%d, want %d-%d\nlayers: %+v", lo, hi, tc.lo, tc.hi, tc.s.Layers())
			}
			// The table's fixed layers plus the padding range add up to
			// the same range.
			sum, pad := 0, 0
			for _, l := range tc.s.Layers() {
				sum += l.Bytes
				if l.MaxBytes > 0 {
					pad = l.MaxBytes
				}
			}
			if sum != lo || sum+pad != hi {
				t.Fatalf("layers sum to %d (+%d padding), overhead is %d-%d: %+v", sum, pad, lo, hi, tc.s.Layers())
			}
		})
	}
}

func TestSeed000PageCase(t *testing.T) {
	s := seed000()
	for _, tc := range []struct {
		overlay, underlay, frame, mlx5 int
		fitsFrame, fitsMLX5            bool
		arith                          string
	}{
		// 8 + 8 + 14 + 3986 + 2 = 4018, padded by 2 to 4020;
		// 20 + 8 + 8 + 4020 + 16 = 4072; frame 14 + 4072 = 4086;
		// mlx5 4072 + 22 = 4094 <= 4096.
		{3986, 4072, 4086, 4094, true, true,
			"20 outer IPv4 + 8 ESP + 8 ESP IV + [8 UDP + 8 VXLAN + 14 inner Ethernet + 3986 overlay + 2 ESP trailer = 4018, +2 padding = 4020] + 16 ESP ICV = 4072"},
		// 8 + 8 + 14 + 3992 + 2 = 4024, no padding; 20 + 16 + 4024 + 16
		// = 4076; frame 4090; mlx5 4076 + 22 = 4098 > 4096.
		{3992, 4076, 4090, 4098, true, false,
			"20 outer IPv4 + 8 ESP + 8 ESP IV + [8 UDP + 8 VXLAN + 14 inner Ethernet + 3992 overlay + 2 ESP trailer = 4024, +0 padding = 4024] + 16 ESP ICV = 4076"},
	} {
		f := s.PageFit(tc.overlay, PageSize)
		if f.UnderlayLen != tc.underlay || f.Frame != tc.frame || f.MLX5Buffer != tc.mlx5 || f.FitsFrame != tc.fitsFrame || f.FitsMLX5 != tc.fitsMLX5 {
			t.Errorf("overlay %d: got %+v, want underlay %d frame %d (fits %v) mlx5 %d (fits %v)", tc.overlay, f, tc.underlay, tc.frame, tc.fitsFrame, tc.mlx5, tc.fitsMLX5)
		}
		if f.Arithmetic != tc.arith {
			t.Errorf("overlay %d arithmetic:\n got %s\nwant %s", tc.overlay, f.Arithmetic, tc.arith)
		}
	}
	// Largest overlay whose frame fits: 3996 -> 4028 (no padding) -> 4080
	// -> frame 4094; 3997 -> 4029 + 3 -> 4084 -> frame 4098.
	if got := s.MaxOverlay(PageSize, s.FrameLen); got != 3996 {
		t.Errorf("max overlay for the frame in a page: %d, want 3996", got)
	}
	// Largest whose mlx5 buffer fits: packet <= 4074: 3988 -> 4072; 3989
	// -> 4021 + 3 -> 4076.
	if got := s.MaxOverlay(PageSize, s.MLX5BufferLen); got != 3988 {
		t.Errorf("max overlay for the mlx5 buffer in a page: %d, want 3988", got)
	}
	// One 802.1Q tag on the underlay: 3992's frame is 4094, still fits.
	s.UnderlayVLANs = 1
	if f := s.PageFit(3992, PageSize); f.Frame != 4094 || !f.FitsFrame {
		t.Errorf("3992 with a VLAN tag: %+v, want frame 4094 fitting", f)
	}
	// IPv6 underlay: 20 more bytes; 3986 -> 4092 packet, 4106 frame.
	s = seed000()
	s.OuterIPv6 = true
	if f := s.PageFit(3986, PageSize); f.UnderlayLen != 4092 || f.Frame != 4106 || f.FitsFrame {
		t.Errorf("3986 over IPv6: %+v, want packet 4092, frame 4106, not fitting", f)
	}
}

func TestMaxOverlay(t *testing.T) {
	for _, tc := range []struct {
		name          string
		s             Stack
		underlay, max int
	}{
		// 20 + 16 + pad4(M + 32) + 16 <= 9216 -> M + 32 <= 9164 -> 9132
		{"the ConnectX-6 SR-IOV guide underlay 9216", seed000(), 9216, 9132},
		// 20 + 16 + pad4(M + 32) + 16 <= 1500 -> M + 32 <= 1448 -> 1416
		{"the ConnectX-6 SR-IOV guide underlay 1500", seed000(), 1500, 1416},
		{"the ConnectX-6 SR-IOV guide underlay 1600 (its 1500 overlay run)", seed000(), 1600, 1516},
		// 20 + 16 + pad4(M + 2) + 16 <= 1500 -> 1446
		{"IPv4 tunnel GCM 1500", Stack{Encap: EncapNone, ESP: ESPTunnel, Cipher: gcm128()}, 1500, 1446},
		// 20 + 8 + 16 + pad16(M + 2) + 16 <= 1500 -> M + 2 <= 1440 -> 1438
		{"IPv4 tunnel CBC-SHA256 1500", Stack{Encap: EncapNone, ESP: ESPTunnel, Cipher: Ciphers["aes-cbc-hmac-sha256"]}, 1500, 1438},
		// 40 + 8 + 16 + pad16(M + 2) + 16 <= 1500 -> pad16(M + 2) <= 1420;
		// the largest multiple of 16 there is 1408 -> M <= 1406
		{"IPv6 tunnel CBC-SHA256 1500", Stack{Encap: EncapNone, ESP: ESPTunnel, Cipher: Ciphers["aes-cbc-hmac-sha256"], OuterIPv6: true}, 1500, 1406},
		// 40 + 16 + pad4(M + 2) + 16 <= 1500 -> 1426
		{"IPv6 tunnel GCM 1500", Stack{Encap: EncapNone, ESP: ESPTunnel, Cipher: gcm128(), OuterIPv6: true}, 1500, 1426},
		{"VXLAN no ESP 1500", Stack{Encap: EncapVXLAN, ESP: ESPNone}, 1500, 1450},
		{"VXLAN over IPv6 no ESP 1500", Stack{Encap: EncapVXLAN, ESP: ESPNone, OuterIPv6: true}, 1500, 1430},
		// transport, no encap: 20 + 16 + pad4(M - 20 + 2) + 16 <= 1500 ->
		// M - 18 <= 1448 -> 1466
		{"IPv4 transport GCM 1500", Stack{Encap: EncapNone, ESP: ESPTransport, Cipher: gcm128()}, 1500, 1466},
		{"too small", seed000(), 100, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.s.MaxOverlay(tc.underlay, tc.s.UnderlayLen)
			if got != tc.max {
				t.Fatalf("max overlay %d, want %d", got, tc.max)
			}
			if got == 0 {
				return
			}
			if n := tc.s.UnderlayLen(got); n > tc.underlay {
				t.Fatalf("overlay %d needs %d > %d", got, n, tc.underlay)
			}
			if n := tc.s.UnderlayLen(got + 1); n <= tc.underlay {
				t.Fatalf("overlay %d also fits (%d <= %d): not the largest", got+1, n, tc.underlay)
			}
		})
	}
}

// Seed 001: "ensure that the MTU of the VM's NIC is at least 100 bytes <
// MTU of the host's bond". sluice computes the real headroom.
func TestSeed001GuestRule(t *testing.T) {
	for _, tc := range []struct {
		name          string
		s             Stack
		host, max     int
		ruleSafe      bool
		overheadRange [2]int
	}{
		// Geneve over ESP transport GCM: 84-87 bytes; 1500 -> 1416, so
		// 1400 (host - 100) is safe with 16 bytes to spare.
		{"geneve 1500", seed001(), 1500, 1416, true, [2]int{84, 87}},
		{"geneve 9000", seed001(), 9000, 8916, true, [2]int{84, 87}},
		// 16 option bytes: 100-103 -> 1400 exactly: the rule just holds.
		{"geneve +16 options 1500", Stack{Encap: EncapGeneve, GeneveOptions: 16, ESP: ESPTransport, Cipher: gcm128()}, 1500, 1400, true, [2]int{100, 103}},
		// 20 option bytes: 104-107 -> 1396: host - 100 is too big.
		{"geneve +20 options 1500", Stack{Encap: EncapGeneve, GeneveOptions: 20, ESP: ESPTransport, Cipher: gcm128()}, 1500, 1396, false, [2]int{104, 107}},
		// IPv6 underlay: 104-107 -> 1396: the rule of thumb fails.
		{"geneve over IPv6 1500", Stack{Encap: EncapGeneve, ESP: ESPTransport, Cipher: gcm128(), OuterIPv6: true}, 1500, 1396, false, [2]int{104, 107}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewReport(tc.s, tc.host, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			if r.Guest.MaxGuestMTU != tc.max || r.Guest.RuleSafe != tc.ruleSafe || r.Guest.RuleOfThumb != tc.host-100 {
				t.Fatalf("guest %+v, want max %d, rule %d safe=%v", r.Guest, tc.max, tc.host-100, tc.ruleSafe)
			}
			if r.OverheadMin != tc.overheadRange[0] || r.OverheadMax != tc.overheadRange[1] {
				t.Fatalf("overhead %d-%d, want %v", r.OverheadMin, r.OverheadMax, tc.overheadRange)
			}
			if r.Guest.TCPMSS != tc.max-40 {
				t.Fatalf("MSS %d, want %d", r.Guest.TCPMSS, tc.max-40)
			}
		})
	}
}

func TestReportChecks(t *testing.T) {
	r, err := NewReport(seed000(), 9216, []int{9000, 9200}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// 9000: 9032 (no padding) -> 20 + 16 + 9032 + 16 = 9084 fits 9216;
	// 9200: 9232 -> 9284 does not.
	want := []Check{{Overlay: 9000, UnderlayLen: 9084, Fits: true}, {Overlay: 9200, UnderlayLen: 9284, Fits: false}}
	for i, w := range want {
		c := r.Checks[i]
		if c.Overlay != w.Overlay || c.UnderlayLen != w.UnderlayLen || c.Fits != w.Fits {
			t.Errorf("check %d: %+v, want %+v", i, c, w)
		}
	}
	if r.MaxOverlayMTU != 9132 {
		t.Errorf("max %d, want 9132", r.MaxOverlayMTU)
	}
	// The page section always has the ConnectX-6 SR-IOV guide's two candidates first.
	if len(r.Page.Fits) < 2 || r.Page.Fits[0].Overlay != 3986 || r.Page.Fits[1].Overlay != 3992 {
		t.Fatalf("page candidates %+v", r.Page.Fits)
	}
	if r.Page.MaxFrame != 3996 || r.Page.MaxMLX5 != 3988 {
		t.Fatalf("page maxima %d/%d, want 3996/3988", r.Page.MaxFrame, r.Page.MaxMLX5)
	}
}

func TestStackValidate(t *testing.T) {
	for _, s := range []Stack{
		{Encap: "gre", ESP: ESPNone},
		{Encap: EncapVXLAN, ESP: "beet"},
		{Encap: EncapVXLAN, ESP: ESPTransport}, // no cipher sizes
		{Encap: EncapGeneve, GeneveOptions: 6, ESP: ESPNone},
		{Encap: EncapGeneve, GeneveOptions: 256, ESP: ESPNone},
		{Encap: EncapVXLAN, GeneveOptions: 4, ESP: ESPNone},
		{Encap: EncapVXLAN, ESP: ESPNone, UnderlayVLANs: 3},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("%+v: accepted", s)
		}
	}
}
