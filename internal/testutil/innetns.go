// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"net"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
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

// Link returns a device's ifindex and MAC inside a namespace.
func Link(t testing.TB, ns, dev string) (int, net.HardwareAddr) {
	t.Helper()
	var idx int
	var mac net.HardwareAddr
	InNetns(t, ns, func() {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			t.Errorf("link %s in %s: %v", dev, ns, err)
			return
		}
		idx, mac = l.Attrs().Index, l.Attrs().HardwareAddr
	})
	if idx == 0 {
		t.FailNow()
	}
	return idx, mac
}
