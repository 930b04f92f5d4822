// SPDX-License-Identifier: Apache-2.0

package mtu

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The MTU calculator: what each layer of an encrypted overlay packet costs,
// byte by byte, and the largest overlay MTU that fits an underlay MTU or a
// 4 KiB page. Sizes are the protocols' fixed sizes (no IP options, no IPv6
// extension headers other than ESP itself).

// Header sizes in bytes.
const (
	EthernetHeader = 14 // destination MAC, source MAC, EtherType; the FCS is not counted
	VLANTag        = 4  // one 802.1Q tag
	EthernetFCS    = 4
	IPv4Header     = 20
	IPv6Header     = 40
	UDPHeader      = 8
	VXLANHeader    = 8
	GeneveHeader   = 8 // without options
	ESPHeader      = 8 // SPI and sequence number
	ESPTrailer     = 2 // pad length and next header
	// MLX5HardMTU is what mlx5 adds to the MTU to size a receive buffer:
	// MLX5E_ETH_HARD_MTU = ETH_HLEN + VLAN_HLEN + ETH_FCS_LEN
	// (drivers/net/ethernet/mellanox/mlx5/core/en.h, Linux 6.12).
	MLX5HardMTU = EthernetHeader + VLANTag + EthernetFCS
	// PageSize is the x86-64 page the "whole frame in one page" variant
	// of the ConnectX-6 SR-IOV guide aims for.
	PageSize = 4096
	// MinIPv4MTU and MinIPv6MTU are the smallest MTUs the kernel accepts
	// for an interface carrying IPv4 / IPv6.
	MinIPv4MTU = 68
	MinIPv6MTU = 1280
	// MaxGeneveOptions is the most option bytes a Geneve header can carry
	// (6-bit length field in 4-byte words).
	MaxGeneveOptions = 252
)

// Cipher is an ESP transform as far as sizes go.
type Cipher struct {
	// Name is sluice's name for it, as in host.yaml and `sluice mtu`.
	Name string `json:"name"`
	// Kernel is the XFRM algorithm name(s).
	Kernel string `json:"kernel"`
	// IV is the explicit IV carried in each packet.
	IV int `json:"iv"`
	// ICV is the integrity check value at the end of the packet.
	ICV int `json:"icv"`
	// Align is what ESP payload + padding + trailer must be a multiple
	// of: the cipher's block size, at least 4 (RFC 4303 2.4).
	Align int `json:"align"`
}

// Ciphers sluice knows the sizes of. rfc4106 128 and 256 differ only in
// the key; the ICV is the full 16 bytes.
var Ciphers = map[string]Cipher{
	"aes-gcm-128":         {Name: "aes-gcm-128", Kernel: "rfc4106(gcm(aes)) 128-bit key, 128-bit ICV", IV: 8, ICV: 16, Align: 4},
	"aes-gcm-256":         {Name: "aes-gcm-256", Kernel: "rfc4106(gcm(aes)) 256-bit key, 128-bit ICV", IV: 8, ICV: 16, Align: 4},
	"chacha20-poly1305":   {Name: "chacha20-poly1305", Kernel: "rfc7539esp(chacha20,poly1305)", IV: 8, ICV: 16, Align: 4},
	"aes-cbc-hmac-sha256": {Name: "aes-cbc-hmac-sha256", Kernel: "cbc(aes) + hmac(sha256) truncated to 128 bits", IV: 16, ICV: 16, Align: 16},
	"aes-cbc-hmac-sha1":   {Name: "aes-cbc-hmac-sha1", Kernel: "cbc(aes) + hmac(sha1) truncated to 96 bits", IV: 16, ICV: 12, Align: 16},
}

// CipherNames lists Ciphers' keys, sorted.
func CipherNames() []string {
	return slices.Sorted(maps.Keys(Ciphers))
}

// Encap is the overlay encapsulation.
type Encap string

const (
	EncapNone   Encap = "none"
	EncapVXLAN  Encap = "vxlan"
	EncapGeneve Encap = "geneve"
)

// ESPMode is how ESP wraps the packet.
type ESPMode string

const (
	ESPNone      ESPMode = "none"
	ESPTransport ESPMode = "transport"
	ESPTunnel    ESPMode = "tunnel"
)

// Stack describes the layers of an overlay packet.
type Stack struct {
	Encap Encap `json:"encap"`
	// GeneveOptions is the option bytes in each Geneve header (a multiple
	// of 4, at most 252).
	GeneveOptions int `json:"geneve_options,omitempty"`
	// InnerVLAN: the encapsulated Ethernet frame carries an 802.1Q tag.
	InnerVLAN bool    `json:"inner_vlan,omitempty"`
	ESP       ESPMode `json:"esp"`
	Cipher    Cipher  `json:"cipher"`
	// OuterIPv6: the underlay (and, in tunnel mode, the tunnelled VTEP
	// header) is IPv6.
	OuterIPv6 bool `json:"outer_ipv6"`
	// InnerIPv6: the overlay packets are IPv6. It matters only for ESP
	// transport mode without encapsulation, where the overlay packet's
	// own header stays in front of ESP.
	InnerIPv6 bool `json:"inner_ipv6,omitempty"`
	// UnderlayVLANs is the number of 802.1Q tags on the underlay frame;
	// it changes the frame size, not the MTU.
	UnderlayVLANs int `json:"underlay_vlans,omitempty"`
}

// Validate reports a stack that cannot exist.
func (s Stack) Validate() error {
	switch s.Encap {
	case EncapNone, EncapVXLAN, EncapGeneve:
	default:
		return fmt.Errorf("encapsulation %q: use none, vxlan or geneve", s.Encap)
	}
	switch s.ESP {
	case ESPNone, ESPTransport, ESPTunnel:
	default:
		return fmt.Errorf("ESP mode %q: use none, transport or tunnel", s.ESP)
	}
	if s.ESP != ESPNone && (s.Cipher.Align < 4 || s.Cipher.Align%4 != 0 || s.Cipher.ICV <= 0) {
		return fmt.Errorf("cipher %q: unknown sizes; use one of %s", s.Cipher.Name, strings.Join(CipherNames(), ", "))
	}
	if s.GeneveOptions < 0 || s.GeneveOptions > MaxGeneveOptions || s.GeneveOptions%4 != 0 {
		return fmt.Errorf("geneve options of %d bytes: Geneve options are a multiple of 4 bytes, at most %d", s.GeneveOptions, MaxGeneveOptions)
	}
	if s.GeneveOptions != 0 && s.Encap != EncapGeneve {
		return fmt.Errorf("geneve options need Geneve encapsulation")
	}
	if s.UnderlayVLANs < 0 || s.UnderlayVLANs > 2 {
		return fmt.Errorf("%d underlay VLAN tags: use 0, 1 or 2", s.UnderlayVLANs)
	}
	return nil
}

func (s Stack) outerIP() int {
	if s.OuterIPv6 {
		return IPv6Header
	}
	return IPv4Header
}

func (s Stack) innerIP() int {
	if s.InnerIPv6 {
		return IPv6Header
	}
	return IPv4Header
}

func ipName(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

// Term is one layer's share of a packet.
type Term struct {
	Name  string `json:"name"`
	Bytes int    `json:"bytes"`
	// MaxBytes > Bytes marks a layer whose size varies (ESP padding).
	MaxBytes int `json:"max_bytes,omitempty"`
	// Note says what the bytes are.
	Note string `json:"note,omitempty"`
	// Encrypted: the layer sits inside ESP's encrypted payload.
	Encrypted bool `json:"encrypted,omitempty"`
	// Overlay marks the overlay packet itself (the MTU being solved for).
	Overlay bool `json:"overlay,omitempty"`
}

// encapTerms are the headers between the ESP header (or the outer IP
// header) and the overlay packet: tunnel IP, UDP, VXLAN/Geneve, inner
// Ethernet.
func (s Stack) encapTerms() []Term {
	var t []Term
	enc := s.ESP != ESPNone
	if s.ESP == ESPTunnel && s.Encap != EncapNone {
		t = append(t, Term{Name: "tunnelled " + ipName(s.OuterIPv6) + " header (VTEP to VTEP)", Bytes: s.outerIP(), Encrypted: enc})
	}
	switch s.Encap {
	case EncapVXLAN:
		t = append(t, Term{Name: "UDP header", Bytes: UDPHeader, Encrypted: enc},
			Term{Name: "VXLAN header", Bytes: VXLANHeader, Note: "flags, VNI", Encrypted: enc})
	case EncapGeneve:
		t = append(t, Term{Name: "UDP header", Bytes: UDPHeader, Encrypted: enc},
			Term{Name: "Geneve header", Bytes: GeneveHeader, Note: "version, option length, VNI", Encrypted: enc})
		if s.GeneveOptions > 0 {
			t = append(t, Term{Name: "Geneve options", Bytes: s.GeneveOptions, Encrypted: enc})
		}
	}
	if s.Encap != EncapNone {
		t = append(t, Term{Name: "inner Ethernet header", Bytes: EthernetHeader, Note: "the overlay frame's MACs and EtherType", Encrypted: enc})
		if s.InnerVLAN {
			t = append(t, Term{Name: "inner 802.1Q tag", Bytes: VLANTag, Encrypted: enc})
		}
	}
	return t
}

// Packet lays out one underlay IP packet carrying an overlay packet of
// overlay bytes, with the ESP padding that length needs: the terms in wire
// order (outer IP header first), summing to the underlay packet length.
func (s Stack) Packet(overlay int) []Term {
	var t []Term
	if s.ESP == ESPTransport && s.Encap == EncapNone {
		// The overlay packet's own IP header stays in front of ESP.
		hdr := s.innerIP()
		t = append(t, Term{Name: "overlay " + ipName(s.InnerIPv6) + " header (stays outside ESP)", Bytes: hdr, Overlay: true})
		t = append(t, s.espHead()...)
		t = append(t, Term{Name: "overlay packet payload", Bytes: overlay - hdr, Overlay: true, Encrypted: true})
		return append(t, s.espTail(overlay-hdr)...)
	}
	if s.Encap != EncapNone || s.ESP == ESPTunnel {
		t = append(t, Term{Name: "outer " + ipName(s.OuterIPv6) + " header", Bytes: s.outerIP()})
	}
	if s.ESP != ESPNone {
		t = append(t, s.espHead()...)
	}
	inner := s.encapTerms()
	t = append(t, inner...)
	t = append(t, Term{Name: "overlay packet", Bytes: overlay, Overlay: true, Encrypted: s.ESP != ESPNone})
	if s.ESP != ESPNone {
		payload := overlay
		for _, x := range inner {
			payload += x.Bytes
		}
		t = append(t, s.espTail(payload)...)
	}
	return t
}

func (s Stack) espHead() []Term {
	return []Term{
		{Name: "ESP header", Bytes: ESPHeader, Note: "SPI 4 + sequence number 4"},
		{Name: "ESP IV", Bytes: s.Cipher.IV, Note: "explicit IV of " + s.Cipher.Name},
	}
}

// espTail is padding, trailer and ICV after payload bytes of ESP payload.
func (s Stack) espTail(payload int) []Term {
	pad := padTo(payload+ESPTrailer, s.Cipher.Align)
	return []Term{
		{Name: "ESP padding", Bytes: pad, Note: fmt.Sprintf("payload + padding + trailer to a multiple of %d", s.Cipher.Align), Encrypted: true},
		{Name: "ESP trailer", Bytes: ESPTrailer, Note: "pad length 1 + next header 1", Encrypted: true},
		{Name: "ESP ICV", Bytes: s.Cipher.ICV, Note: "integrity check value"},
	}
}

// padTo is how many bytes bring n up to a multiple of align.
func padTo(n, align int) int {
	if r := n % align; r != 0 {
		return align - r
	}
	return 0
}

// UnderlayLen is the length of the underlay IP packet that carries an
// overlay packet of overlay bytes.
func (s Stack) UnderlayLen(overlay int) int {
	n := 0
	for _, t := range s.Packet(overlay) {
		n += t.Bytes
	}
	return n
}

// FrameLen is the underlay Ethernet frame as it sits in memory: header,
// VLAN tags and IP packet (no FCS: NICs strip it).
func (s Stack) FrameLen(overlay int) int {
	return EthernetHeader + VLANTag*s.UnderlayVLANs + s.UnderlayLen(overlay)
}

// MLX5BufferLen is the receive buffer mlx5 needs for the underlay packet:
// the packet plus MLX5HardMTU.
func (s Stack) MLX5BufferLen(overlay int) int { return s.UnderlayLen(overlay) + MLX5HardMTU }

// Layers lists the layers in wire order with the padding as a range, for
// the overhead table.
func (s Stack) Layers() []Term {
	var out []Term
	for _, t := range s.Packet(s.minOverlay()) {
		if t.Name == "ESP padding" {
			t.Bytes, t.MaxBytes = 0, s.Cipher.Align-1
		}
		if t.Overlay {
			t.Bytes = 0
		}
		out = append(out, t)
	}
	return out
}

func (s Stack) minOverlay() int {
	if s.InnerIPv6 {
		return MinIPv6MTU
	}
	return MinIPv4MTU
}

// Overhead is the fewest and most bytes the stack adds to an overlay
// packet (they differ by the ESP padding).
func (s Stack) Overhead() (lo, hi int) {
	lo, hi = 1<<30, 0
	base := s.minOverlay()
	align := 1
	if s.ESP != ESPNone {
		align = s.Cipher.Align
	}
	for m := base; m < base+align; m++ {
		o := s.UnderlayLen(m) - m
		lo, hi = min(lo, o), max(hi, o)
	}
	return lo, hi
}

// MaxOverlay is the largest overlay packet whose underlay packet is at
// most limit bytes long given fit (UnderlayLen, FrameLen or
// MLX5BufferLen), or 0 when not even the smallest fits.
func (s Stack) MaxOverlay(limit int, fit func(int) int) int {
	// fit grows with overlay, by at most the padding's steps: start at an
	// estimate and walk down.
	lo, _ := s.Overhead()
	m := limit - lo - (fit(s.minOverlay()) - s.UnderlayLen(s.minOverlay()))
	for ; m >= s.minOverlay(); m-- {
		if fit(m) <= limit {
			return m
		}
	}
	return 0
}

// Describe names the stack in one line.
func (s Stack) Describe() string {
	var parts []string
	switch s.Encap {
	case EncapVXLAN:
		parts = append(parts, "VXLAN")
	case EncapGeneve:
		g := "Geneve"
		if s.GeneveOptions > 0 {
			g += fmt.Sprintf(" (+%d option bytes)", s.GeneveOptions)
		}
		parts = append(parts, g)
	}
	if s.InnerVLAN {
		parts = append(parts, "inner 802.1Q")
	}
	if s.ESP != ESPNone {
		parts = append(parts, fmt.Sprintf("ESP %s mode (%s: IV %d, ICV %d, padding to %d)", s.ESP, s.Cipher.Name, s.Cipher.IV, s.Cipher.ICV, s.Cipher.Align))
	}
	if len(parts) == 0 {
		return "no encapsulation, no ESP"
	}
	return strings.Join(parts, " over ") + " over " + ipName(s.OuterIPv6)
}

// Arithmetic spells out the underlay packet length for one overlay size,
// term by term, as the tests and `sluice mtu` print it.
func (s Stack) Arithmetic(overlay int) string {
	var b strings.Builder
	terms := s.Packet(overlay)
	sum := 0
	var enc []string
	encSum := 0
	flushEnc := func(pad Term) {
		// ESP payload + trailer, then the padding that aligns it.
		fmt.Fprintf(&b, " + [%s = %d, +%d padding = %d]", strings.Join(enc, " + "), encSum, pad.Bytes, encSum+pad.Bytes)
	}
	var pad Term
	for _, t := range terms {
		switch {
		case t.Name == "ESP padding":
			pad = t
		case t.Encrypted || t.Name == "ESP trailer":
			enc = append(enc, fmt.Sprintf("%d %s", t.Bytes, shortName(t)))
			encSum += t.Bytes
			if t.Name == "ESP trailer" {
				flushEnc(pad)
				sum += encSum + pad.Bytes
			}
		default:
			if sum > 0 || b.Len() > 0 {
				b.WriteString(" + ")
			}
			fmt.Fprintf(&b, "%d %s", t.Bytes, shortName(t))
			sum += t.Bytes
		}
	}
	fmt.Fprintf(&b, " = %d", sum)
	return b.String()
}

func shortName(t Term) string {
	n := t.Name
	for _, p := range []string{" header (VTEP to VTEP)", " header (stays outside ESP)"} {
		n = strings.Replace(n, p, "", 1)
	}
	n = strings.TrimSuffix(n, " header")
	if t.Overlay {
		n = strings.Replace(n, "overlay packet", "overlay", 1)
	}
	return n
}

// Fit is how one overlay MTU fares against a page.
type Fit struct {
	Overlay     int    `json:"overlay_mtu"`
	UnderlayLen int    `json:"underlay_packet"`
	Arithmetic  string `json:"arithmetic"`
	// Frame is the underlay Ethernet frame in memory (header + tags +
	// packet); MLX5Buffer is the packet + 22 as mlx5 sizes its buffers.
	Frame      int  `json:"frame"`
	FitsFrame  bool `json:"fits_frame"`
	MLX5Buffer int  `json:"mlx5_buffer"`
	FitsMLX5   bool `json:"fits_mlx5"`
}

// PageFit evaluates overlay against a page of size bytes.
func (s Stack) PageFit(overlay, size int) Fit {
	f := Fit{Overlay: overlay, UnderlayLen: s.UnderlayLen(overlay), Arithmetic: s.Arithmetic(overlay),
		Frame: s.FrameLen(overlay), MLX5Buffer: s.MLX5BufferLen(overlay)}
	f.FitsFrame, f.FitsMLX5 = f.Frame <= size, f.MLX5Buffer <= size
	return f
}

// Report is everything `sluice mtu` prints.
type Report struct {
	Stack       Stack  `json:"stack"`
	Description string `json:"description"`
	Layers      []Term `json:"layers"`
	OverheadMin int    `json:"overhead_min"`
	OverheadMax int    `json:"overhead_max"`
	UnderlayMTU int    `json:"underlay_mtu"`
	// MaxOverlayMTU is the largest overlay MTU whose packets fit the
	// underlay MTU; 0 when none does.
	MaxOverlayMTU int    `json:"max_overlay_mtu"`
	MaxArithmetic string `json:"max_arithmetic,omitempty"`
	// Checks are the overlay MTUs asked about.
	Checks []Check `json:"checks,omitempty"`
	Page   Page    `json:"page"`
	Guest  Guest   `json:"guest"`
}

// Check is one overlay MTU against the underlay MTU.
type Check struct {
	Overlay     int    `json:"overlay_mtu"`
	UnderlayLen int    `json:"underlay_packet"`
	Arithmetic  string `json:"arithmetic"`
	Fits        bool   `json:"fits"`
}

// Page is the "whole frame in one page" variant (the ConnectX-6 SR-IOV guide).
type Page struct {
	Size int `json:"size"`
	// MaxFrame / MaxMLX5 are the largest overlay MTUs whose frame /
	// mlx5 receive buffer fits the page.
	MaxFrame int   `json:"max_overlay_mtu_frame"`
	MaxMLX5  int   `json:"max_overlay_mtu_mlx5"`
	Fits     []Fit `json:"candidates"`
}

// Guest is the VM single-flow guide's rule for VMs: the guest's MTU must leave the host
// room for its encapsulation, or every GSO segment the guest sends is too
// big for the host's MTU after encapsulation and the host segments in
// software.
type Guest struct {
	HostMTU int `json:"host_mtu"`
	// MaxGuestMTU is the largest guest MTU whose segments still fit the
	// host MTU after encapsulation (= the max overlay MTU).
	MaxGuestMTU int `json:"max_guest_mtu"`
	// RuleOfThumb is the VM single-flow guide's "at least 100 bytes below the host's".
	RuleOfThumb int  `json:"rule_of_thumb"`
	RuleSafe    bool `json:"rule_of_thumb_safe"`
	// TCPMSS is the MSS (IPv4, no options) a guest at MaxGuestMTU uses.
	TCPMSS int `json:"tcp_mss"`
}

// GuestHeadroom is the VM single-flow guide's rule of thumb.
const GuestHeadroom = 100

// NewReport computes the report for an underlay MTU, the overlay MTUs to
// check, and a page size (0: PageSize). Seed 000's page candidates 3986
// and 3992 are always evaluated against the page.
func NewReport(s Stack, underlayMTU int, checks []int, page int) (*Report, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if page == 0 {
		page = PageSize
	}
	r := &Report{Stack: s, Description: s.Describe(), Layers: s.Layers(), UnderlayMTU: underlayMTU}
	r.OverheadMin, r.OverheadMax = s.Overhead()
	r.MaxOverlayMTU = s.MaxOverlay(underlayMTU, s.UnderlayLen)
	if r.MaxOverlayMTU > 0 {
		r.MaxArithmetic = s.Arithmetic(r.MaxOverlayMTU)
	}
	for _, c := range checks {
		n := s.UnderlayLen(c)
		r.Checks = append(r.Checks, Check{Overlay: c, UnderlayLen: n, Arithmetic: s.Arithmetic(c), Fits: n <= underlayMTU})
	}
	r.Page = Page{Size: page, MaxFrame: s.MaxOverlay(page, s.FrameLen), MaxMLX5: s.MaxOverlay(page, s.MLX5BufferLen)}
	cands := []int{page - 110, page - 104}
	if page == PageSize {
		cands = []int{3986, 3992} // the ConnectX-6 SR-IOV guide: 4096 - 110, and the route MTU it measured
	}
	for _, c := range append(cands, checks...) {
		if c >= s.minOverlay() && c < page && !slices.ContainsFunc(r.Page.Fits, func(f Fit) bool { return f.Overlay == c }) {
			r.Page.Fits = append(r.Page.Fits, s.PageFit(c, page))
		}
	}
	g := Guest{HostMTU: underlayMTU, MaxGuestMTU: r.MaxOverlayMTU, RuleOfThumb: underlayMTU - GuestHeadroom}
	g.RuleSafe = g.RuleOfThumb <= g.MaxGuestMTU && g.RuleOfThumb >= s.minOverlay()
	if g.MaxGuestMTU > 0 {
		g.TCPMSS = g.MaxGuestMTU - IPv4Header - 20
	}
	r.Guest = g
	return r, nil
}

// ParseCipher looks a cipher up by sluice's name.
func ParseCipher(name string) (Cipher, error) {
	c, ok := Ciphers[name]
	if !ok {
		return Cipher{}, fmt.Errorf("cipher %q: use one of %s", name, strings.Join(CipherNames(), ", "))
	}
	return c, nil
}
