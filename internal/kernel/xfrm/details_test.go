// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStateDetailFromIproute2Bytes reads the details of the SAs iproute2
// sent (state_add_test.go), with counters and limits written in at the
// offsets offsetof() gives for struct xfrm_usersa_info (lft at 96, curlft
// at 160, stats at 192): what `show ipsec sa` prints and apply compares
// come from one parser.
func TestStateDetailFromIproute2Bytes(t *testing.T) {
	key, _ := hex.DecodeString("0102030405060708090a0b0c0d0e0f1011121314")
	for i, tc := range iproute2NewSA {
		raw, _ := hex.DecodeString(tc.want)
		b := raw[unix.SizeofNlMsghdr:]
		ne := binary.NativeEndian
		ne.PutUint64(b[96+8:], 1<<20) // hard_byte_limit
		ne.PutUint64(b[96+32:], 3600) // soft_add_expires_seconds
		ne.PutUint64(b[160:], 1500)   // curlft.bytes
		ne.PutUint64(b[160+8:], 3)    // curlft.packets
		ne.PutUint64(b[160+16:], 1e9) // curlft.add_time
		ne.PutUint32(b[192+4:], 7)    // stats.replay
		ne.PutUint32(b[192+8:], 2)    // stats.integrity_failed
		for _, keys := range []bool{false, true} {
			d, err := parseStateDetail(b, keys)
			if err != nil {
				t.Fatalf("%s: %v", tc.cmd, err)
			}
			want := StateDetail{Algorithm: "rfc4106(gcm(aes))", Bytes: 1500, Packets: 3, AddTime: 1e9,
				Replay: 7, Failed: 2, HardBytes: 1 << 20, SoftAdd: 3600,
				ReplayWindow: uint32([]int{0, 32}[i]), KeyBits: 160, KeyDigest: sha256.Sum256(key)}
			d.State = State{}
			got := d
			got.Key = nil
			if got != want {
				t.Errorf("%s (keys %v):\n got %+v\nwant %+v", tc.cmd, keys, got, want)
			}
			switch {
			case keys && (d.Key == nil || *d.Key != hex.EncodeToString(key)):
				t.Errorf("%s: key %v, want %x", tc.cmd, d.Key, key)
			case !keys && d.Key != nil:
				t.Errorf("%s: key material without keys: %s", tc.cmd, *d.Key)
			}
		}
	}
}
