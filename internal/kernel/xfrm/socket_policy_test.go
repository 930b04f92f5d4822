// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"sluice/internal/testutil"
)

// A per-socket policy (what an IKE daemon sets on its own sockets so its
// packets bypass IPsec) comes back from the kernel's dump with direction
// XFRM_POLICY_MAX + dir; show ipsec policy printed it as "dir?". Set one
// with setsockopt(IP_XFRM_POLICY) on a real socket and read it back.
func TestSocketPolicyDirection(t *testing.T) {
	_, ns := testutil.NewNetNS(t)
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Set(ns); err != nil {
		t.Fatal(err)
	}
	fd, serr := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	netns.Set(orig)
	orig.Close()
	runtime.UnlockOSThread()
	if serr != nil {
		t.Fatal(serr)
	}
	defer unix.Close(fd)
	// struct xfrm_userpolicy_info: selector (56), lifetime cfg (64),
	// current (32), priority, index, then dir, action, flags, share.
	var pol [168]byte
	pol[40] = unix.AF_INET // sel.family (u16 at 40)
	pol[160] = byte(DirOut)
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.IPPROTO_IP, unix.IP_XFRM_POLICY,
		uintptr(unsafe.Pointer(&pol[0])), uintptr(len(pol)), 0); e != 0 {
		t.Fatalf("setsockopt IP_XFRM_POLICY: %v", e)
	}
	ps, err := HandleAt(ns).DumpPolicies()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 {
		t.Fatalf("%d policies in the namespace, want the socket's one: %+v", len(ps), ps)
	}
	if d := ps[0].Dir; !d.Socket() || d.String() != "socket out" {
		t.Errorf("socket policy: dir %d printed %q, want \"socket out\"", d, d)
	}
	for d, want := range map[Dir]string{DirIn: "in", DirOut: "out", DirFwd: "fwd", 3: "socket in", 5: "socket fwd", 9: "dir 9"} {
		if d.String() != want || d.Socket() != (d >= 3 && d <= 5) {
			t.Errorf("Dir(%d) = %q socket %v, want %q", d, d, d.Socket(), want)
		}
	}
}
