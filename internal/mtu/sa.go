// SPDX-License-Identifier: Apache-2.0

package mtu

import (
	"fmt"
	"strings"
)

// The MTU of an XFRM SA: how large a packet may be before the kernel's ESP
// output makes it larger than the route under it allows. This is
// xfrm_state_mtu (net/xfrm/xfrm_state.c, Linux 6.12) with the header
// length esp_init_state / esp6_init_state give an SA (net/ipv4/esp4.c,
// net/ipv6/esp6.c): the kernel compares a forwarded packet with it
// (xfrm_init_pmtu sets the bundle's MTU from it, ip_forward and
// ip6_forward send frag-needed / packet-too-big above it), and packet
// offload checks the same limit in xfrm_dev_offload_ok.

// SAMode is an SA's XFRM_MODE_*.
type SAMode uint8

const (
	SATransport SAMode = 0
	SATunnel    SAMode = 1
	SABEET      SAMode = 4
)

// SAEncap is an SA's encapsulation (struct xfrm_encap_tmpl's type).
type SAEncap uint16

const (
	SAEncapNone SAEncap = 0
	// SAEncapUDP is UDP_ENCAP_ESPINUDP, NAT traversal (RFC 3948).
	SAEncapUDP SAEncap = 2
	// SAEncapTCP is TCP_ENCAP_ESPINTCP (RFC 8229): only the 2-byte
	// length is counted; the TCP header belongs to the socket.
	SAEncapTCP SAEncap = 7
)

// SA is an ESP SA as far as its size on the wire goes.
type SA struct {
	Mode SAMode
	// OuterIPv6: the SA's own family (the outer header in tunnel mode,
	// the packet's in transport mode) is IPv6.
	OuterIPv6 bool
	// SelectorIPv6: the SA's selector family; it matters in BEET mode only.
	SelectorIPv6 bool
	// IV, Block and ICV are crypto_aead_ivsize, crypto_aead_blocksize and
	// crypto_aead_authsize of the SA's transform (see Transform).
	IV, Block, ICV int
	Encap          SAEncap
	// ESN (64-bit sequence numbers) is here to say it changes nothing:
	// only the low 32 bits travel in the ESP header, the high ones enter
	// the ICV only (RFC 4303 2.2.1).
	ESN bool
}

// ESP and IP header sizes the kernel adds (struct ip_esp_hdr, iphdr,
// ipv6hdr, udphdr; IPV4_BEET_PHMAXLEN).
const (
	espHdr        = 8
	ipv4BEETPHMax = 8
)

// HeaderLen is x->props.header_len: what the SA puts in front of the
// packet.
func (sa SA) HeaderLen() int {
	n := espHdr + sa.IV
	switch sa.Mode {
	case SATunnel:
		n += IPv4Header
		if sa.OuterIPv6 {
			n = espHdr + sa.IV + IPv6Header
		}
	case SABEET:
		if !sa.SelectorIPv6 {
			n += ipv4BEETPHMax
			if sa.OuterIPv6 {
				n += IPv6Header - IPv4Header
			}
		}
	}
	switch sa.Encap {
	case SAEncapUDP:
		n += UDPHeader
	case SAEncapTCP:
		n += 2
	}
	return n
}

// MTU is xfrm_state_mtu for a VALID ESP SA over a route of MTU mtu: the
// largest packet the SA carries without the result exceeding mtu. The
// kernel answers 1 when nothing fits.
func (sa SA) MTU(mtu int) int {
	block := (max(sa.Block, 1) + 3) &^ 3 // ALIGN(blocksize, 4)
	netAdj := 0
	if sa.Mode == SATransport || sa.Mode == SABEET {
		netAdj = IPv4Header
		if sa.OuterIPv6 {
			netAdj = IPv6Header
		}
	}
	overhead := sa.HeaderLen() + sa.ICV + netAdj
	if mtu <= overhead {
		return 1
	}
	payload := (mtu - overhead) &^ (block - 1)
	if payload <= 2 {
		return 1
	}
	return payload + netAdj - ESPTrailer
}

// cipherSizes are crypto_aead_ivsize and crypto_aead_blocksize of the
// kernel's ESP transforms, by XFRM algorithm name (net/xfrm/xfrm_algo.c
// lists the names; the sizes are the crypto API's, which for a stream mode
// such as ctr or an AEAD is a block of 1, whatever xfrm_algo.c's
// blockbits says).
var cipherSizes = map[string][2]int{
	"rfc4106(gcm(aes))":             {8, 1},
	"rfc4309(ccm(aes))":             {8, 1},
	"rfc4543(gcm(aes))":             {8, 1},
	"rfc7539esp(chacha20,poly1305)": {8, 1},
	"ecb(cipher_null)":              {0, 1},
	"cbc(des)":                      {8, 8},
	"cbc(des3_ede)":                 {8, 8},
	"cbc(cast5)":                    {8, 8},
	"cbc(blowfish)":                 {8, 8},
	"cbc(aes)":                      {16, 16},
	"cbc(serpent)":                  {16, 16},
	"cbc(camellia)":                 {16, 16},
	"cbc(twofish)":                  {16, 16},
	"cbc(sm4)":                      {16, 16},
	"rfc3686(ctr(aes))":             {8, 1},
}

// authTruncBits is the ICV the kernel uses for an XFRMA_ALG_AUTH
// algorithm given without a truncation length (xfrm_algo.c's
// icv_truncbits; XFRMA_ALG_AUTH_TRUNC states its own).
var authTruncBits = map[string]int{
	"digest_null": 0, "hmac(md5)": 96, "hmac(sha1)": 96, "hmac(sha256)": 96,
	"hmac(sha384)": 192, "hmac(sha512)": 256, "hmac(rmd160)": 96,
	"xcbc(aes)": 96, "cmac(aes)": 96, "hmac(sm3)": 256,
}

// Transform is an SA's algorithms as XFRM reports them: an AEAD with its
// ICV length, or a cipher (Crypt) with an optional authentication
// algorithm (Auth) whose ICV is AuthTruncBits (0: the kernel's default
// for Auth).
type Transform struct {
	AEAD          string
	ICVBits       int
	Crypt         string
	Auth          string
	AuthTruncBits int
}

// Sizes returns the IV, block and ICV sizes of t, or an error naming the
// algorithm sluice does not know (the caller then keeps such SAs away
// from the fast path).
func (t Transform) Sizes() (iv, block, icv int, err error) {
	if t.AEAD != "" {
		s, ok := cipherSizes[t.AEAD]
		if !ok || !strings.HasPrefix(t.AEAD, "rfc") {
			return 0, 0, 0, fmt.Errorf("AEAD %q: sizes not known; known: rfc4106(gcm(aes)), rfc4309(ccm(aes)), rfc4543(gcm(aes)), rfc7539esp(chacha20,poly1305)", t.AEAD)
		}
		if t.ICVBits <= 0 || t.ICVBits%8 != 0 {
			return 0, 0, 0, fmt.Errorf("AEAD %q: ICV of %d bits", t.AEAD, t.ICVBits)
		}
		return s[0], s[1], t.ICVBits / 8, nil
	}
	crypt := t.Crypt
	if crypt == "" {
		crypt = "ecb(cipher_null)" // authentication-only ESP
	}
	s, ok := cipherSizes[crypt]
	if !ok {
		return 0, 0, 0, fmt.Errorf("cipher %q: sizes not known", crypt)
	}
	bits := t.AuthTruncBits
	if t.Auth != "" && bits == 0 {
		if bits, ok = authTruncBits[t.Auth]; !ok {
			return 0, 0, 0, fmt.Errorf("authentication %q: ICV length not known", t.Auth)
		}
	}
	return s[0], s[1], bits / 8, nil
}
