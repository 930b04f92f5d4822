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
