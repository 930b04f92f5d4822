//go:build vmtest

// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"net"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"sluice/internal/testutil"
)

// TestVMMonitorMigrateMovesSA is TestMonitorMigrateResyncs with an ESP SA,
// which the host kernel cannot hold: xfrm_migrate() replaces the SA with a
// copy to the new peer and deletes the old one, announced only on the
// MIGRATE group, and the watch must resync.
func TestVMMonitorMigrateMovesSA(t *testing.T) {
	testutil.RequireVM(t)
	ns, h := testutil.NewNetNS(t)
	testMonitorMigrate(t, ns, h, true)
}

// TestVMMonitorMigrateStateResyncs: XFRM_MSG_MIGRATE_STATE (Linux 7.2)
// replaces one SA in place (new peer, same SPI and sequence numbers) and
// says so only on the MIGRATE group: the watch must resync, and the dump
// then holds the moved SA. Runs on the next kernel (SLUICE_VM_KERNEL=next).
func TestVMMonitorMigrateStateResyncs(t *testing.T) {
	testutil.RequireVM(t)
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	if compareRelease(release, 7, 2) < 0 {
		t.Skipf("XFRM_MSG_MIGRATE_STATE is Linux 7.2+, this kernel is %s: run with SLUICE_VM_KERNEL=next", release)
	}
	ns, h := testutil.NewNetNS(t)
	w, _ := watchXFRM(t, h)
	testutil.IP(t, ns, "xfrm", "state", "add", "src", "192.0.2.1", "dst", "192.0.2.2", "proto", "esp", "spi", "0x200",
		"reqid", "5", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", "0x"+strings.Repeat("22", 20), "128")
	if ev := nextEvent(t, w.Events); ev.Kind != StateNew {
		t.Fatalf("after the SA add: %v (%v), want state-new", ev.Kind, ev.Err)
	}
	moved := addr("198.51.100.9")
	if err := HandleAt(h).MigrateState(addr("192.0.2.2"), 0x200, addr("192.0.2.1"), moved, 5); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, w.Events)
	if ev.Kind != Resync || ev.Err == nil || !strings.Contains(ev.Err.Error(), "XFRM_MSG_MIGRATE_STATE") ||
		!strings.Contains(ev.Err.Error(), "spi 0x200") {
		t.Fatalf("after the migration: %v (%v), want a resync naming XFRM_MSG_MIGRATE_STATE and spi 0x200", ev.Kind, ev.Err)
	}
	ss, err := HandleAt(h).DumpStates()
	if err != nil || len(ss) != 1 || ss[0].Dst != moved || ss[0].SPI != 0x200 {
		t.Fatalf("SAs after the migration: %+v, %v; want spi 0x200 to %s only", ss, err, moved)
	}
}

// compareRelease compares a kernel release like "7.3.4+deb13-amd64" with
// major.minor.
func compareRelease(release string, major, minor int) int {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return -1
	}
	var ma, mi int
	for i, p := range parts[:2] {
		n := 0
		for _, c := range p {
			if c < '0' || c > '9' {
				break
			}
			n = n*10 + int(c-'0')
		}
		if i == 0 {
			ma = n
		} else {
			mi = n
		}
	}
	switch {
	case ma != major:
		return ma - major
	default:
		return mi - minor
	}
}

// TestVMDecodesSADirAndCPU: the kernel's own dump and notification of SAs
// with XFRMA_SA_DIR (6.10) and XFRMA_SA_PCPU (6.13) decode to State.Dir
// and PerCPU/CPU. Per-CPU SAs need a 6.13+ kernel (SLUICE_VM_KERNEL=next).
func TestVMDecodesSADirAndCPU(t *testing.T) {
	testutil.RequireVM(t)
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	_, h := testutil.NewNetNS(t)
	w, _ := watchXFRM(t, h)
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	sa := func(spi int, dir netlink.SADir, cpu *uint32) *netlink.XfrmState {
		return &netlink.XfrmState{
			Src: net.ParseIP("192.0.2.1"), Dst: net.ParseIP("192.0.2.2"), Proto: netlink.XFRM_PROTO_ESP,
			Mode: netlink.XFRM_MODE_TUNNEL, Spi: spi, Reqid: 7, SADir: dir, Pcpunum: cpu,
			Aead: &netlink.XfrmStateAlgo{Name: "rfc4106(gcm(aes))", Key: make([]byte, 20), ICVLen: 128},
		}
	}
	want := map[uint32]State{0x300: {Dir: SADirOut}}
	if err := nh.XfrmStateAdd(sa(0x300, netlink.XFRM_SA_DIR_OUT, nil)); err != nil {
		t.Fatalf("SA with dir out on %s: %v", release, err)
	}
	if compareRelease(release, 6, 13) >= 0 {
		// 7.3 takes XFRMA_SA_PCPU only with XFRMA_SA_DIR ("SA_PCPU only
		// supported with SA_DIR", verify_newsa_info).
		cpu := uint32(1)
		if err := nh.XfrmStateAdd(sa(0x301, netlink.XFRM_SA_DIR_OUT, &cpu)); err != nil {
			t.Fatalf("per-CPU SA on %s: %v", release, err)
		}
		want[0x301] = State{Dir: SADirOut, PerCPU: true, CPU: 1}
	} else {
		t.Logf("kernel %s: no per-CPU SAs before 6.13, only the direction is checked", release)
	}
	for range want {
		ev := nextEvent(t, w.Events)
		if ev.Kind != StateNew {
			t.Fatalf("%v (%v), want state-new", ev.Kind, ev.Err)
		}
		wt := want[ev.State.SPI]
		if ev.State.Dir != wt.Dir || ev.State.PerCPU != wt.PerCPU || ev.State.CPU != wt.CPU {
			t.Errorf("notified spi %#x: dir %v per-CPU %v cpu %d; want %v %v %d", ev.State.SPI, ev.State.Dir, ev.State.PerCPU, ev.State.CPU, wt.Dir, wt.PerCPU, wt.CPU)
		}
	}
	ss, err := HandleAt(h).DumpStates()
	if err != nil || len(ss) != len(want) {
		t.Fatalf("dump: %+v, %v", ss, err)
	}
	for _, s := range ss {
		wt := want[s.SPI]
		if s.Dir != wt.Dir || s.PerCPU != wt.PerCPU || s.CPU != wt.CPU {
			t.Errorf("dumped spi %#x: dir %v per-CPU %v cpu %d; want %v %v %d", s.SPI, s.Dir, s.PerCPU, s.CPU, wt.Dir, wt.PerCPU, wt.CPU)
		}
	}
}
