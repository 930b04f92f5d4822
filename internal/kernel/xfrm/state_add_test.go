// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"sluice/internal/testutil"
)

// XFRM_MSG_NEWSA requests as iproute2 6.1 sends them, captured with
//
//	strace -e trace=sendmsg -e write=all -xx ip -n NS xfrm state add ...
//
// (the host kernel refuses them for lack of ESP/GCM, after they were sent).
// The 4 bytes at offset 8 are the sequence number, which is not compared.
// They double as the SA-side parser's input: a dump or NEWSA notification
// carries the same struct xfrm_usersa_info and attributes. The VM tests
// (test/vm) cover SAs installed in a kernel that has ESP.
var iproute2NewSA = []struct {
	cmd  string
	st   *netlink.XfrmState
	off  *Offload
	want string
}{
	{
		cmd: "src 10.0.0.1 dst 10.0.0.2 proto esp spi 0x1000 reqid 7 mode tunnel aead 'rfc4106(gcm(aes))' 0x0102...14 128 offload dev lo dir in",
		st: &netlink.XfrmState{Src: net.ParseIP("10.0.0.1"), Dst: net.ParseIP("10.0.0.2"), Proto: netlink.XFRM_PROTO_ESP,
			Spi: 0x1000, Reqid: 7, Mode: netlink.XFRM_MODE_TUNNEL, Aead: testAead()},
		off:  &Offload{Ifindex: 1, Flags: OffloadInbound},
		want: "5c01000010000500633f026b0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000a00000200000000000000000000000000001000320000000a000001000000000000000000000000ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000700000002000100000000000000000060001200726663343130362867636d2861657329290000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000a0000000800000000102030405060708090a0b0c0d0e0f10111213140c001c000100000002000000",
	},
	{
		cmd: "src 2001:db8::1 dst 2001:db8::2 proto esp spi 0x2000 reqid 9 mode transport replay-window 32 if_id 5 mark 0x10 mask 0xff aead ... sel src 2001:db8:1::/64 dst 2001:db8:2::/64 proto udp sport 500 dport 4500 offload dev lo dir out",
		st: &netlink.XfrmState{Src: net.ParseIP("2001:db8::1"), Dst: net.ParseIP("2001:db8::2"), Proto: netlink.XFRM_PROTO_ESP,
			Spi: 0x2000, Reqid: 9, Mode: netlink.XFRM_MODE_TRANSPORT, ReplayWindow: 32, Ifid: 5,
			Mark: &netlink.XfrmMark{Value: 0x10, Mask: 0xff}, Aead: testAead(),
			Selector: &netlink.XfrmPolicy{Src: mustCIDR("2001:db8:1::/64"), Dst: mustCIDR("2001:db8:2::/64"),
				Proto: netlink.Proto(unix.IPPROTO_UDP), SrcPort: 500, DstPort: 4500}},
		off:  &Offload{Ifindex: 1},
		want: "7001000010000500633f026b0000000020010db800020000000000000000000020010db80001000000000000000000001194ffff01f4ffff0a00404011000000000000000000000020010db8000000000000000000000002000020003200000020010db8000000000000000000000001ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000090000000a000020000000000000000060001200726663343130362867636d2861657329290000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000a0000000800000000102030405060708090a0b0c0d0e0f10111213140c001c0001000000000000000c00150010000000ff00000008001f0005000000",
	},
}

func testAead() *netlink.XfrmStateAlgo {
	key, _ := hex.DecodeString("0102030405060708090a0b0c0d0e0f1011121314")
	return &netlink.XfrmStateAlgo{Name: "rfc4106(gcm(aes))", Key: key, ICVLen: 128}
}

func mustCIDR(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

func TestNewSAMatchesIproute2(t *testing.T) {
	for _, tc := range iproute2NewSA {
		t.Run(tc.cmd, func(t *testing.T) {
			want, _ := hex.DecodeString(tc.want)
			req, err := newSARequest(tc.st, tc.off)
			if err != nil {
				t.Fatal(err)
			}
			got := req.Serialize()
			// Length, type and flags (0:8), then everything after the
			// sequence number and port id.
			if !bytes.Equal(got[:8], want[:8]) || !bytes.Equal(got[16:], want[16:]) {
				t.Fatalf("ip xfrm state add %s\n got %x\nwant %x", tc.cmd, got, want)
			}
		})
	}
}

func TestParseStateFromIproute2Bytes(t *testing.T) {
	want := []State{
		{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), Proto: ProtoESP,
			SPI: 0x1000, Reqid: 7, Mode: ModeTunnel, Offload: &Offload{Ifindex: 1, Flags: OffloadInbound},
			Alg: StateAlg{AEAD: "rfc4106(gcm(aes))", ICVBits: 128}},
		{Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"), Proto: ProtoESP,
			SPI: 0x2000, Reqid: 9, Mode: ModeTransport, Offload: &Offload{Ifindex: 1}, IfID: 5, Mark: 0x10, MarkMask: 0xff,
			Alg: StateAlg{AEAD: "rfc4106(gcm(aes))", ICVBits: 128},
			Sel: Selector{Src: netip.MustParsePrefix("2001:db8:1::/64"), Dst: netip.MustParsePrefix("2001:db8:2::/64"),
				Proto: unix.IPPROTO_UDP, SPort: 500, SPortMask: 0xffff, DPort: 4500, DPortMask: 0xffff}},
	}
	for i, tc := range iproute2NewSA {
		b, _ := hex.DecodeString(tc.want)
		got, err := parseStateMsg(b[unix.SizeofNlMsghdr:])
		if err != nil {
			t.Fatalf("%s: %v", tc.cmd, err)
		}
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("%s:\n got %+v offload %+v\nwant %+v offload %+v", tc.cmd, got, got.Offload, want[i], want[i].Offload)
		}
		if strings.Contains(fmt.Sprintf("%#v", got), "0x1, 0x2, 0x3, 0x4") {
			t.Errorf("key material leaked into State: %#v", got)
		}
	}
}

// TestStateAddReachesKernel sends StateAdd's request to the real kernel.
// The host has no ESP/GCM, so the kernel refuses at the algorithm lookup
// (ENOSYS) or type lookup (EPROTONOSUPPORT) - both after it has validated
// the attribute lengths (XFRMA_OFFLOAD_DEV included) and the usersa_info
// (verify_newsa_info). A kernel with ESP (the VM) accepts the SA, and then
// it must dump back. A malformed offload attribute must fail differently.
func TestStateAddReachesKernel(t *testing.T) {
	_, ns := testutil.NewNetNS(t)
	x := HandleAt(ns)
	for _, tc := range iproute2NewSA {
		err := x.StateAdd(tc.st, tc.off)
		switch {
		case err == nil:
			states, err := x.DumpStates()
			if err != nil || len(states) == 0 || states[len(states)-1].SPI != uint32(tc.st.Spi) {
				t.Fatalf("%s: added, but dump says %+v, %v", tc.cmd, states, err)
			}
		case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPROTONOSUPPORT):
			t.Logf("kernel got as far as the crypto: %v", err)
		default:
			t.Fatalf("%s: kernel rejected the encoding: %v", tc.cmd, err)
		}
	}

	body, err := encodeNewSA(iproute2NewSA[0].st, nil)
	if err != nil {
		t.Fatal(err)
	}
	body = append(body, nlAttr(nl.XFRMA_OFFLOAD_DEV, []byte{1, 0, 0, 0})...) // ifindex only
	err = x.execute(xfrmRequest(nl.XFRM_MSG_NEWSA, unix.NLM_F_ACK, body), 0, nil)
	if err == nil || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPROTONOSUPPORT) {
		t.Fatalf("a 4-byte XFRMA_OFFLOAD_DEV got past attribute validation: %v", err)
	}
	t.Logf("short offload attribute: %v", err)
}

func TestStateAddRefusesBadSpecs(t *testing.T) {
	good := *iproute2NewSA[0].st
	for _, tc := range []struct {
		name    string
		edit    func(*netlink.XfrmState)
		off     *Offload
		wantErr string
	}{
		{"spi 0", func(s *netlink.XfrmState) { s.Spi = 0 }, nil, "spi must be set"},
		{"mixed families", func(s *netlink.XfrmState) { s.Dst = net.ParseIP("2001:db8::1") }, nil, "one family"},
		{"no src", func(s *netlink.XfrmState) { s.Src = nil }, nil, "both be set"},
		{"esn without window", func(s *netlink.XfrmState) { s.ESN = true }, nil, "replay window"},
		{"pcpu", func(s *netlink.XfrmState) { n := uint32(1); s.Pcpunum = &n }, nil, "Pcpunum"},
		{"offload without device", func(*netlink.XfrmState) {}, &Offload{}, "ifindex 0"},
	} {
		st := good
		tc.edit(&st)
		if _, err := encodeNewSA(&st, tc.off); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}
