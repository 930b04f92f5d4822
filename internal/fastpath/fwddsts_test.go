// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"math/bits"
	"net/netip"
	"testing"
)

// setDstBits covers exactly the first-24-bit values a prefix covers: every
// one of them for a prefix shorter than 24 bits, the one holding it for a
// longer one.
func TestSetDstBits(t *testing.T) {
	for _, c := range []struct {
		prefix string
		first  uint32 // first value covered
		n      int
	}{
		{"48.1.2.0/24", 48<<16 | 1<<8 | 2, 1},
		{"48.1.2.77/32", 48<<16 | 1<<8 | 2, 1},
		{"48.1.0.0/20", 48<<16 | 1<<8, 16},
		{"16.0.0.0/8", 16 << 16, 1 << 16},
		{"0.0.0.0/0", 0, 1 << 24},
		{"2001:db8:48::/48", 0x2001_0d, 1},
		{"2001::/16", 0x2001_00, 256},
	} {
		p := netip.MustParsePrefix(c.prefix)
		fam := 0
		if p.Addr().Is6() {
			fam = 1
		}
		bm := make([]uint64, 2*dstWords)
		setDstBits(bm, fam, addrWords(p.Masked().Addr())[0], p.Bits())
		n := 0
		for _, w := range bm {
			n += bits.OnesCount64(w)
		}
		at := fam*dstWords + int(c.first>>6)
		if n != c.n || bm[at]>>(c.first&63)&1 == 0 {
			t.Errorf("%s: %d bits set (want %d), value %#x set: %v", c.prefix, n, c.n, c.first, bm[at]>>(c.first&63)&1 == 1)
		}
	}
}
