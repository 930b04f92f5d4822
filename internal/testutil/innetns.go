// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"encoding/json"
	"net"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// InNetns runs f on a thread switched into the named namespace, so that
// netlink sockets opened and ifindexes resolved in f belong to it. The
// thread is never switched back: it dies with its goroutine.
func InNetns(t testing.TB, name string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		h, err := netns.GetFromName(name)
		if err != nil {
			t.Error(err)
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			t.Error(err)
			return
		}
		f()
	}()
	<-done
}

// InNetnsHandle runs f on the calling goroutine's thread switched into the
// namespace h, then switches it back, so that f may call t.Fatal. A thread
// that cannot return is not safe to hand back to Go: that panics.
func InNetnsHandle(t testing.TB, h netns.NsHandle, f func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	if err := netns.Set(h); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic("cannot return to the test's network namespace: " + err.Error())
		}
	}()
	f()
}

// InNewNetns runs f in a new, unnamed network namespace that nothing holds
// once f returns, so the kernel frees it (and its inode) right after.
func InNewNetns(t testing.TB, f func()) {
	t.Helper()
	ns, err := created(t, netns.New)
	if err != nil {
		t.Fatalf("new netns: %v", err)
	}
	defer ns.Close()
	InNetnsHandle(t, ns, f)
}

// Link returns a device's ifindex and MAC inside a namespace, as `ip -j
// link show` reports them (netlink itself is internal/kernel's alone).
func Link(t testing.TB, ns, dev string) (int, net.HardwareAddr) {
	t.Helper()
	var links []struct {
		Ifindex int    `json:"ifindex"`
		Address string `json:"address"`
	}
	out := Run(t, "ip", "-n", ns, "-j", "link", "show", "dev", dev)
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		t.Fatalf("ip -n %s -j link show dev %s: %v\n%s", ns, dev, err, out)
	}
	mac, err := net.ParseMAC(links[0].Address)
	if err != nil {
		t.Fatalf("%s in %s: MAC %q: %v", dev, ns, links[0].Address, err)
	}
	return links[0].Ifindex, mac
}
