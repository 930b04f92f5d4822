// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"reflect"
	"strings"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"sluice/internal/testutil"
)

// TestMonitorMigrateResyncs: XFRM_MSG_MIGRATE rewrites a policy's template
// in place and is announced only on the MIGRATE group, so a watch that
// does not join it, or drops the type, goes stale without a word. The
// host kernel (CONFIG_XFRM_MIGRATE, no ESP) migrates a policy alone; the
// VM runs the same with an SA (migrate_vm_test.go).
func TestMonitorMigrateResyncs(t *testing.T) {
	ns, h := testutil.NewNetNS(t)
	testMonitorMigrate(t, ns, h, false)
}

// testMonitorMigrate adds an OUT tunnel policy (and with sa its ESP SA),
// moves its peer from 192.0.2.2 to 198.51.100.9 with XFRM_MSG_MIGRATE and
// checks that the watch says Resync and that a dump, the mirror's answer
// to it, holds the moved template (and SA).
func testMonitorMigrate(t *testing.T, ns string, h netns.NsHandle, sa bool) {
	w, _ := watchXFRM(t, h)
	x := HandleAt(h)
	if sa {
		testutil.IP(t, ns, "xfrm", "state", "add", "src", "192.0.2.1", "dst", "192.0.2.2", "proto", "esp", "spi", "0x100",
			"reqid", "3", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", "0x"+strings.Repeat("11", 20), "128")
		if ev := nextEvent(t, w.Events); ev.Kind != StateNew {
			t.Fatalf("after the SA add: %v (%v), want state-new", ev.Kind, ev.Err)
		}
	}
	testutil.IP(t, ns, "xfrm", "policy", "add", "src", "10.0.0.0/24", "dst", "10.1.0.0/24", "dir", "out",
		"tmpl", "src", "192.0.2.1", "dst", "192.0.2.2", "proto", "esp", "reqid", "3", "mode", "tunnel")
	if ev := nextEvent(t, w.Events); ev.Kind != PolicyNew {
		t.Fatalf("after the policy add: %v (%v), want policy-new", ev.Kind, ev.Err)
	}
	moved := addr("198.51.100.9")
	err := x.Migrate(DirOut, pfx("10.0.0.0/24"), pfx("10.1.0.0/24"), []Migration{{
		OldSrc: addr("192.0.2.1"), OldDst: addr("192.0.2.2"), NewSrc: addr("192.0.2.1"), NewDst: moved,
		Proto: ProtoESP, Mode: ModeTunnel, Reqid: 3,
	}})
	if err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, w.Events)
	if ev.Kind != Resync || ev.Err == nil || !strings.Contains(ev.Err.Error(), "XFRM_MSG_MIGRATE") ||
		!strings.Contains(ev.Err.Error(), moved.String()) {
		t.Fatalf("after the migration: %v (%v), want a resync naming XFRM_MSG_MIGRATE and %s", ev.Kind, ev.Err, moved)
	}
	ps, err := x.DumpPolicies()
	if err != nil || len(ps) != 1 || len(ps[0].Tmpls) != 1 || ps[0].Tmpls[0].Dst != moved {
		t.Fatalf("dump after the migration: %+v, %v; want the template moved to %s", ps, err, moved)
	}
	if !sa {
		return
	}
	ss, err := x.DumpStates()
	if err != nil || len(ss) != 1 || ss[0].Dst != moved || ss[0].SPI != 0x100 {
		t.Fatalf("SAs after the migration: %+v, %v; want spi 0x100 to %s only", ss, err, moved)
	}
}

func TestDecodeMigrationsResync(t *testing.T) {
	id := make([]byte, xfrmPolicyIDLen)
	id[polIDDir] = byte(DirOut)
	um := make([]byte, xfrmUserMigrateLen)
	copy(um[umOldDaddr:], addr("192.0.2.2").AsSlice())
	copy(um[umOldSaddr:], addr("192.0.2.1").AsSlice())
	copy(um[umNewDaddr:], addr("198.51.100.9").AsSlice())
	copy(um[umNewSaddr:], addr("192.0.2.1").AsSlice())
	um[umProto], um[umMode] = unix.IPPROTO_ESP, byte(ModeTunnel)
	ne.PutUint32(um[umReqid:], 3)
	ne.PutUint16(um[umOldFamily:], unix.AF_INET)
	ne.PutUint16(um[umNewFamily:], unix.AF_INET)
	migrate := append(append([]byte(nil), id...), nlAttr(nl.XFRMA_MIGRATE, um)...)

	dir, ms, err := parseMigrate(migrate)
	want := Migration{OldSrc: addr("192.0.2.1"), OldDst: addr("192.0.2.2"), NewSrc: addr("192.0.2.1"), NewDst: addr("198.51.100.9"),
		Proto: ProtoESP, Mode: ModeTunnel, Reqid: 3}
	if err != nil || dir != DirOut || !reflect.DeepEqual(ms, []Migration{want}) {
		t.Fatalf("parseMigrate: %v %+v %v, want out %+v", dir, ms, err, want)
	}

	// struct xfrm_user_migrate_state begins with the SA's xfrm_usersa_id.
	saID := make([]byte, 128)
	copy(saID[saIDDaddr:], addr("192.0.2.2").AsSlice())
	be.PutUint32(saID[saIDSPI:], 0x1234)
	ne.PutUint16(saID[saIDFamily:], unix.AF_INET)
	saID[saIDProto] = unix.IPPROTO_ESP

	for _, tc := range []struct {
		name string
		typ  uint16
		in   []byte
		says []string
	}{
		{"migrate", nl.XFRM_MSG_MIGRATE, migrate, []string{"XFRM_MSG_MIGRATE of a out policy", "198.51.100.9", "reqid 3"}},
		{"migrate without XFRMA_MIGRATE", nl.XFRM_MSG_MIGRATE, id, []string{"undecodable XFRM_MSG_MIGRATE"}},
		{"truncated migrate", nl.XFRM_MSG_MIGRATE, id[:10], []string{"undecodable XFRM_MSG_MIGRATE"}},
		{"migrate state", xfrmMsgMigrateState, saID, []string{"XFRM_MSG_MIGRATE_STATE", "spi 0x1234 dst 192.0.2.2"}},
		{"truncated migrate state", xfrmMsgMigrateState, nil, []string{"XFRM_MSG_MIGRATE_STATE replaced an SA"}},
		{"a type from a newer kernel", 0x2f, []byte{1, 2, 3}, []string{"type 0x2f is unknown"}},
		{"getsadinfo (never multicast)", nl.XFRM_MSG_GETSADINFO, nil, []string{"unknown"}},
	} {
		ev, ok, err := decodeXFRMEvent(tc.typ, tc.in)
		if err != nil || !ok || ev.Kind != Resync || ev.Err == nil {
			t.Errorf("%s: %v ok=%v err=%v (%v), want a resync", tc.name, ev.Kind, ok, err, ev.Err)
			continue
		}
		for _, s := range tc.says {
			if !strings.Contains(ev.Err.Error(), s) {
				t.Errorf("%s: %q does not say %q", tc.name, ev.Err, s)
			}
		}
	}
	// Known and irrelevant to the mirror: still ignored.
	for typ := range ignoredTypes {
		if ev, ok, err := decodeXFRMEvent(typ, nil); ok || err != nil {
			t.Errorf("type %#x: %v ok=%v err=%v, want ignored", typ, ev.Kind, ok, err)
		}
	}
}

// TestDecodeSADirectionAndCPU: XFRMA_SA_DIR (6.10) and XFRMA_SA_PCPU (6.13)
// reach State, and a short one is an error rather than "absent".
func TestDecodeSADirectionAndCPU(t *testing.T) {
	sa := hexBytes(iproute2NewSA[0].want)[unix.SizeofNlMsghdr:]
	base, err := parseStateMsg(sa)
	if err != nil {
		t.Fatal(err)
	}
	if base.Dir != SADirAny || base.PerCPU {
		t.Fatalf("iproute2's SA: dir %v per-CPU %v, want neither", base.Dir, base.PerCPU)
	}
	cpu := make([]byte, 4)
	ne.PutUint32(cpu, 3)
	with := append(append(append([]byte(nil), sa...), nlAttr(nl.XFRMA_SA_DIR, []byte{byte(SADirOut)})...), nlAttr(nl.XFRMA_SA_PCPU, cpu)...)
	got, err := parseStateMsg(with)
	if err != nil || got.Dir != SADirOut || !got.PerCPU || got.CPU != 3 {
		t.Fatalf("with dir out and cpu 3: dir %v per-CPU %v cpu %d, %v", got.Dir, got.PerCPU, got.CPU, err)
	}
	for name, attr := range map[string][]byte{
		"empty XFRMA_SA_DIR":  nlAttr(nl.XFRMA_SA_DIR, nil),
		"short XFRMA_SA_PCPU": nlAttr(nl.XFRMA_SA_PCPU, []byte{1, 0}),
	} {
		if _, err := parseStateMsg(append(append([]byte(nil), sa...), attr...)); err == nil {
			t.Errorf("%s: decoded, want an error", name)
		}
	}
}

func TestFastPathRefusal(t *testing.T) {
	st := func(f func(*State)) *State {
		s := &State{Dst: addr("192.0.2.2"), SPI: 0x100, Proto: ProtoESP, Mode: ModeTunnel}
		f(s)
		return s
	}
	for _, tc := range []struct {
		name string
		s    *State
		dir  Dir
		says string // "" for none
	}{
		{"plain tunnel", st(func(*State) {}), DirOut, ""},
		{"out SA, out policy", st(func(s *State) { s.Dir = SADirOut }), DirOut, ""},
		{"in SA, fwd policy", st(func(s *State) { s.Dir = SADirIn }), DirFwd, ""},
		{"IP-TFS", st(func(s *State) { s.Mode = ModeIPTFS }), DirOut, "IP-TFS"},
		{"per-CPU", st(func(s *State) { s.PerCPU, s.CPU = true, 0 }), DirOut, "per-CPU (cpu 0)"},
		{"in SA, out policy", st(func(s *State) { s.Dir = SADirIn }), DirOut, "direction in, the policy is out"},
		{"out SA, fwd policy", st(func(s *State) { s.Dir = SADirOut }), DirFwd, "direction out, the policy is fwd"},
	} {
		got := tc.s.FastPathRefusal(tc.dir)
		if (got == "") != (tc.says == "") || !strings.Contains(got, tc.says) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.says)
		}
	}
}

// TestDecodeUnknownAttributes: an attribute newer than this code (above
// XFRMA_IPTFS_PKT_SIZE, 41) is recorded on the policy or SA, so that the
// fast path leaves it to the kernel; the last known one is not.
func TestDecodeUnknownAttributes(t *testing.T) {
	pol := hexBytes(iproute2NewPolicy)
	sa := hexBytes(iproute2NewSA[0].want)[unix.SizeofNlMsghdr:]
	for _, tc := range []struct {
		typ  uint16
		want uint16
	}{{41, 0}, {42, 42}, {0x3000, 0x3000}} {
		p, err := parsePolicyMsg(append(append([]byte(nil), pol...), nlAttr(tc.typ, []byte{1, 0, 0, 0})...))
		if err != nil || p.UnknownAttr != tc.want {
			t.Errorf("policy with attribute %d: unknown %d, %v; want %d", tc.typ, p.UnknownAttr, err, tc.want)
		}
		s, err := parseStateMsg(append(append([]byte(nil), sa...), nlAttr(tc.typ, []byte{1, 0, 0, 0})...))
		if err != nil || s.UnknownAttr != tc.want {
			t.Errorf("SA with attribute %d: unknown %d, %v; want %d", tc.typ, s.UnknownAttr, err, tc.want)
		}
		if why := s.FastPathRefusal(DirOut); (why != "") != (tc.want != 0) {
			t.Errorf("SA with attribute %d: refusal %q", tc.typ, why)
		}
	}
}
