// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"encoding/hex"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The body of the XFRM_MSG_NEWPOLICY request iproute2 6.1 sends for
//
//	ip xfrm policy add src 10.0.1.0/24 dst 10.0.2.0/24 proto tcp sport 1000 dport 2000
//	   dir out priority 100 mark 5 mask 0xff if_id 7
//	   tmpl src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x1234 reqid 11 mode tunnel level use
//
// (captured with strace): struct xfrm_userpolicy_info, XFRMA_TMPL,
// XFRMA_MARK, XFRMA_IF_ID - the same layout the kernel dumps.
const iproute2NewPolicy = "0a0002000000000000000000000000000a00010000000000000000000000000007d0ffff03e8ffff02001818060000000000000000000000ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000006400000000000000010000000000000044000500c0000202000000000000000000000000000012343200000002000000c00002010000000000000000000000000b00000001000100ffffffffffffffffffffffff0c00150005000000ff00000008001f0007000000"

var iproute2Policy = Policy{
	Dir: DirOut, Priority: 100, Mark: 5, MarkMask: 0xff, IfID: 7,
	Sel: Selector{Src: netip.MustParsePrefix("10.0.1.0/24"), Dst: netip.MustParsePrefix("10.0.2.0/24"),
		Proto: unix.IPPROTO_TCP, SPort: 1000, SPortMask: 0xffff, DPort: 2000, DPortMask: 0xffff},
	Tmpls: []Tmpl{{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
		Proto: ProtoESP, Mode: ModeTunnel, Reqid: 11, SPI: 0x1234, Optional: true}},
}

func hexBytes(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func TestParsePolicyFromIproute2Bytes(t *testing.T) {
	got, err := parsePolicyMsg(hexBytes(iproute2NewPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, iproute2Policy) {
		t.Fatalf("\n got %+v\nwant %+v", got, iproute2Policy)
	}
}

func TestParsePolicyMalformed(t *testing.T) {
	info := hexBytes(iproute2NewPolicy)[:xfrmPolicyInfoLen]
	with := func(edit func(b []byte), attrs ...[]byte) []byte {
		b := append([]byte(nil), info...)
		edit(b)
		for _, a := range attrs {
			b = append(b, a...)
		}
		return b
	}
	keep := func([]byte) {}
	for _, tc := range []struct {
		name    string
		in      []byte
		wantErr string
	}{
		{"truncated info", info[:100], "100 bytes, want 168"},
		{"v4 prefix /33", with(func(b []byte) { b[42] = 33 }), "prefix length 33"},
		{"unknown family", with(func(b []byte) { b[40] = 99 }), "unknown address family 99"},
		{"attribute overruns message", with(keep, []byte{0x44, 0, 5, 0, 1, 2}), "length 68 with 6 bytes left"},
		{"attribute shorter than its header", with(keep, []byte{2, 0, 5, 0}), "length 2"},
		{"template of 60 bytes", with(keep, nlAttr(nl.XFRMA_TMPL, make([]byte, 60))), "not a multiple of 64"},
		{"template with unknown family", with(keep, nlAttr(nl.XFRMA_TMPL, append(make([]byte, 24), append([]byte{77, 0}, make([]byte, 38)...)...))), "unknown address family 77"},
		{"short mark", with(keep, nlAttr(nl.XFRMA_MARK, []byte{5, 0, 0, 0})), "XFRMA_MARK: 4 bytes"},
		{"short if_id", with(keep, nlAttr(nl.XFRMA_IF_ID, []byte{7})), "XFRMA_IF_ID: 1 bytes"},
		{"empty policy type", with(keep, nlAttr(nl.XFRMA_POLICY_TYPE, nil)), "XFRMA_POLICY_TYPE: empty"},
		{"short offload", with(keep, nlAttr(nl.XFRMA_OFFLOAD_DEV, []byte{1, 0, 0, 0})), "XFRMA_OFFLOAD_DEV: 4 bytes"},
	} {
		if p, err := parsePolicyMsg(tc.in); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: got %+v, %v; want error containing %q", tc.name, p, err, tc.wantErr)
		}
	}
}

// SA notifications cannot be produced on the host (no ESP), so they are
// built here from the uapi layouts around the SA that iproute2 encoded;
// the VM tests see the kernel send them.
func TestDecodeStateEvents(t *testing.T) {
	sa := hexBytes(iproute2NewSA[1].want)[unix.SizeofNlMsghdr:]
	info, saAttrs := sa[:xfrmSAInfoLen], sa[xfrmSAInfoLen:]
	full, err := parseStateMsg(sa)
	if err != nil {
		t.Fatal(err)
	}
	// struct xfrm_usersa_id: daddr, spi, family, proto.
	id := append(append([]byte(nil), info[56:76]...), 10, 0, unix.IPPROTO_ESP, 0)
	mark := nlAttr(nl.XFRMA_MARK, []byte{0x10, 0, 0, 0, 0xff, 0, 0, 0})
	expire := func(hard byte) []byte {
		return append(append(append([]byte(nil), info...), hard, 0, 0, 0, 0, 0, 0, 0), saAttrs...)
	}
	for _, tc := range []struct {
		name string
		typ  uint16
		in   []byte
		want Event
	}{
		{"newsa", nl.XFRM_MSG_NEWSA, sa, Event{Kind: StateNew, State: &full}},
		{"updsa", nl.XFRM_MSG_UPDSA, sa, Event{Kind: StateUpd, State: &full}},
		{"delsa with XFRMA_SA", nl.XFRM_MSG_DELSA, append(append(append([]byte(nil), id...), nlAttr(nl.XFRMA_SA, info)...), saAttrs...),
			Event{Kind: StateDel, State: &full}},
		{"delsa id only", nl.XFRM_MSG_DELSA, append(append([]byte(nil), id...), mark...),
			Event{Kind: StateDel, State: &State{Dst: full.Dst, SPI: 0x2000, Proto: ProtoESP, Mark: 0x10, MarkMask: 0xff}}},
		{"hard expire", nl.XFRM_MSG_EXPIRE, expire(1), Event{Kind: StateExpire, State: &full, Hard: true}},
		{"soft expire", nl.XFRM_MSG_EXPIRE, expire(0), Event{Kind: StateExpire, State: &full}},
		{"flush esp", nl.XFRM_MSG_FLUSHSA, []byte{unix.IPPROTO_ESP, 0, 0, 0}, Event{Kind: StateFlush, State: &State{Proto: ProtoESP}}},
		{"flush any", nl.XFRM_MSG_FLUSHSA, []byte{255, 0, 0, 0}, Event{Kind: StateFlush, State: &State{Proto: 0}}},
	} {
		got, ok, err := decodeXFRMEvent(tc.typ, tc.in)
		if err != nil || !ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v state %+v ok=%v err=%v\nwant %+v state %+v", tc.name, got, got.State, ok, err, tc.want, tc.want.State)
		}
	}
	for _, tc := range []struct {
		name string
		typ  uint16
		in   []byte
	}{
		{"truncated expire", nl.XFRM_MSG_EXPIRE, info},
		{"truncated delsa", nl.XFRM_MSG_DELSA, id[:20]},
		{"delsa with short XFRMA_SA", nl.XFRM_MSG_DELSA, append(append([]byte(nil), id...), nlAttr(nl.XFRMA_SA, info[:200])...)},
		{"empty flush", nl.XFRM_MSG_FLUSHSA, nil},
	} {
		if got, _, err := decodeXFRMEvent(tc.typ, tc.in); err == nil {
			t.Errorf("%s: decoded %+v, want an error", tc.name, got)
		}
	}
	if _, ok, err := decodeXFRMEvent(nl.XFRM_MSG_ACQUIRE, sa); ok || err != nil {
		t.Errorf("acquire: ok=%v err=%v, want ignored", ok, err)
	}
}

func TestDecodePolicyEventsFromBytes(t *testing.T) {
	pol := hexBytes(iproute2NewPolicy)
	info, attrs := pol[:xfrmPolicyInfoLen], pol[xfrmPolicyInfoLen:]
	// struct xfrm_userpolicy_id for a delete by index: zero selector.
	byIndex := make([]byte, xfrmPolicyIDLen)
	ne.PutUint32(byIndex[56:], 0x4321)
	byIndex[60] = byte(DirFwd)
	polexpire := append(append(append([]byte(nil), info...), 1, 0, 0, 0, 0, 0, 0, 0), attrs...)
	sub := nlAttr(nl.XFRMA_POLICY_TYPE, []byte{xfrmPolicyTypeSub, 0, 0, 0, 0, 0})
	for _, tc := range []struct {
		name string
		typ  uint16
		in   []byte
		want Event
	}{
		{"delete by index, no XFRMA_POLICY", nl.XFRM_MSG_DELPOLICY, byIndex, Event{Kind: PolicyDel, Policy: &Policy{Index: 0x4321, Dir: DirFwd}}},
		{"hard polexpire", nl.XFRM_MSG_POLEXPIRE, polexpire, Event{Kind: PolicyExpire, Policy: &iproute2Policy, Hard: true}},
		{"flush sub", nl.XFRM_MSG_FLUSHPOLICY, sub, Event{Kind: PolicyFlush, Policy: &Policy{Sub: true}}},
		{"flush main (no attribute)", nl.XFRM_MSG_FLUSHPOLICY, nil, Event{Kind: PolicyFlush, Policy: &Policy{}}},
	} {
		got, ok, err := decodeXFRMEvent(tc.typ, tc.in)
		if err != nil || !ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v policy %+v ok=%v err=%v\nwant policy %+v", tc.name, got, got.Policy, ok, err, tc.want.Policy)
		}
	}
	if _, _, err := decodeXFRMEvent(nl.XFRM_MSG_POLEXPIRE, info); err == nil {
		t.Error("truncated polexpire decoded")
	}
}
