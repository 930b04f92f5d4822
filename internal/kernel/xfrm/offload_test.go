// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

// The expected bytes are struct xfrm_user_offload as iproute2 6.1 sends it
// (captured with strace, see state_add_test.go): int ifindex in host
// order, __u8 flags, 3 bytes of zero padding.
func TestOffloadMarshalAttr(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Offload
		want string
	}{
		{"crypto out (ip ... offload dev lo dir out)", Offload{Ifindex: 1}, "0100000000000000"},
		{"crypto in (dir in)", Offload{Ifindex: 1, Flags: OffloadInbound}, "0100000002000000"},
		{"packet in, large ifindex", Offload{Ifindex: 0x01020304, Flags: OffloadPacket | OffloadInbound}, "0403020106000000"},
		{"legacy ipv6 flag", Offload{Ifindex: 7, Flags: OffloadIPv6}, "0700000001000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.MarshalAttr()
			if hex.EncodeToString(got) != tc.want {
				t.Fatalf("MarshalAttr(%+v) = %x, want %s", tc.in, got, tc.want)
			}
			back, err := ParseOffload(got)
			if err != nil {
				t.Fatalf("round trip: %v", err)
			}
			if *back != tc.in {
				t.Fatalf("round trip: %+v, want %+v", *back, tc.in)
			}
		})
	}
}

func TestParseOffload(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    Offload
		wantErr string
	}{
		{"packet out", "0500000004000000", Offload{Ifindex: 5, Flags: OffloadPacket}, ""},
		{"packet in", "0500000006000000", Offload{Ifindex: 5, Flags: OffloadPacket | OffloadInbound}, ""},
		{"longer payload from a newer kernel", "050000000400000000000000", Offload{Ifindex: 5, Flags: OffloadPacket}, ""},
		{"unknown flag kept", "0500000084000000", Offload{Ifindex: 5, Flags: 0x84}, ""},
		{"empty", "", Offload{}, "0 bytes"},
		{"no padding (5 bytes)", "0500000004", Offload{}, "5 bytes"},
		{"ifindex 0", "0000000004000000", Offload{}, "ifindex 0"},
		{"negative ifindex", "ffffffff04000000", Offload{}, "ifindex -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := hex.DecodeString(tc.in)
			got, err := ParseOffload(b)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseOffload(%s) = %+v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || *got != tc.want {
				t.Fatalf("ParseOffload(%s) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			if !bytes.Equal(got.MarshalAttr(), b[:xfrmOffloadLen]) {
				t.Fatalf("re-marshal = %x, want %x", got.MarshalAttr(), b[:xfrmOffloadLen])
			}
		})
	}
}

func TestOffloadValidate(t *testing.T) {
	for _, tc := range []struct {
		in      Offload
		wantErr string
	}{
		{Offload{Ifindex: 3, Flags: OffloadPacket | OffloadInbound}, ""},
		{Offload{Ifindex: 0}, "ifindex 0"},
		{Offload{Ifindex: 3, Flags: 0x10}, "unknown flags 0x10"},
	} {
		err := tc.in.validate()
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("validate(%+v) = %v, want %q", tc.in, err, tc.wantErr)
		}
	}
}
