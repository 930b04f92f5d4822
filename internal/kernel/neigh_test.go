// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"sluice/internal/testutil"
)

// neighTestNS is a namespace with a veth pair: v0 10.77.0.1/24 and
// 2001:db8:77::1/64 up, its peer v1 up without addresses.
func neighTestNS(t *testing.T) (string, netns.NsHandle, *netlink.Handle) {
	ns, h := testutil.NewNetNS(t)
	testutil.IP(t, ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	testutil.IP(t, ns, "addr", "add", "10.77.0.1/24", "dev", "v0")
	testutil.IP(t, ns, "addr", "add", "2001:db8:77::1/64", "dev", "v0", "nodad")
	testutil.IP(t, ns, "link", "set", "v0", "up")
	testutil.IP(t, ns, "link", "set", "v1", "up")
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nh.Close)
	return ns, h, nh
}

func TestResolveNextHop(t *testing.T) {
	ns, hns, h := neighTestNS(t)
	v0, err := h.LinkByName("v0")
	if err != nil {
		t.Fatal(err)
	}
	testutil.IP(t, ns, "neigh", "replace", "10.77.0.2", "lladdr", "02:00:00:00:00:02", "dev", "v0", "nud", "permanent")
	testutil.IP(t, ns, "neigh", "replace", "2001:db8:77::2", "lladdr", "02:00:00:00:00:06", "dev", "v0", "nud", "stale")
	testutil.IP(t, ns, "route", "add", "192.0.2.0/24", "via", "10.77.0.2")
	testutil.IP(t, ns, "route", "add", "2001:db8:99::/48", "via", "2001:db8:77::2")
	testutil.IP(t, ns, "route", "add", "198.51.100.0/24", "via", "10.77.0.3")
	for _, tc := range []struct{ ip, mac, wantErr string }{
		{"10.77.0.2", "02:00:00:00:00:02", ""},                         // on-link, permanent
		{"192.0.2.77", "02:00:00:00:00:02", ""},                        // via gateway 10.77.0.2
		{"2001:db8:99::5", "02:00:00:00:00:06", ""},                    // v6, via a stale neighbour
		{"198.51.100.1", "", "no neighbour entry for 10.77.0.3 on v0"}, // the fix: internal/gateway's resolveNextHop
		{"10.77.0.9", "", "no neighbour entry for 10.77.0.9 on v0"},
		{"10.77.0.1", "", "address of this host"},
		{"203.0.113.1", "", "no route to 203.0.113.1"},
	} {
		ifindex, mac, err := ResolveNextHopAt(hns, netip.MustParseAddr(tc.ip))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: got %d %v %v, want error %q", tc.ip, ifindex, mac, err, tc.wantErr)
			}
			continue
		}
		if err != nil || ifindex != v0.Attrs().Index || mac.String() != tc.mac {
			t.Errorf("%s: got ifindex %d mac %v err %v, want %d %s", tc.ip, ifindex, mac, err, v0.Attrs().Index, tc.mac)
		}
	}
}

func TestWatchNeighRoutes(t *testing.T) {
	ns, hns, _ := neighTestNS(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := WatchNeighRoutesAt(ctx, hns)
	if err != nil {
		t.Fatal(err)
	}
	quiet := func() { // swallow signals from the setup, then expect none
		t.Helper()
		for {
			select {
			case <-ch:
			case <-time.After(300 * time.Millisecond):
				return
			}
		}
	}
	expectSignal := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("no signal after %s", what)
		}
	}
	quiet()
	testutil.IP(t, ns, "route", "add", "192.0.2.0/24", "via", "10.77.0.2")
	expectSignal("route add")
	quiet()
	testutil.IP(t, ns, "neigh", "add", "10.77.0.5", "lladdr", "02:00:00:00:00:05", "dev", "v0")
	expectSignal("neigh add")
	quiet()
	testutil.IP(t, ns, "route", "del", "192.0.2.0/24")
	expectSignal("route del")
	quiet()
	testutil.IP(t, ns, "neigh", "del", "10.77.0.5", "dev", "v0")
	expectSignal("neigh del")
	quiet()
	// policy rules change the FIB's answers as routes do (the fast
	// path's FIB result cache depends on there being none)
	testutil.IP(t, ns, "rule", "add", "from", "10.77.0.5", "lookup", "100", "priority", "100")
	expectSignal("rule add")
	quiet()
	testutil.IP(t, ns, "rule", "del", "priority", "100")
	expectSignal("rule del")
	cancel()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("channel not closed after cancel")
		}
	}
}

// TestWatchNeighRoutesSurvivesOverrun floods a tiny socket buffer with
// route changes while the watcher is held, as a busy process would be. vishvananda ends a subscription on ENOBUFS; the watcher
// must signal, subscribe again, and keep reporting later changes.
func TestWatchNeighRoutesSurvivesOverrun(t *testing.T) {
	ns, hns, _ := neighTestNS(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resubscribed := make(chan struct{}, 100)
	release := make(chan struct{})
	ch, err := watchNeighRoutes(ctx, hns, neighWatchOpts{rcvbuf: 4096,
		onResubscribe: func() { resubscribed <- struct{}{} },
		hold:          func() { <-release }})
	if err != nil {
		t.Fatal(err)
	}
	lines := make([]string, 3000)
	for i := range lines {
		lines[i] = fmt.Sprintf("route add 10.%d.%d.0/24 via 10.77.0.2 dev v0 onlink", 100+i>>8, i&255)
	}
	testutil.IPBatch(t, ns, lines) // while the watcher is held: nothing drains the sockets
	close(release)
	select {
	case <-resubscribed:
	case <-time.After(5 * time.Second):
		t.Fatal("3000 route adds into a 4 KiB buffer did not overrun it")
	}
	time.Sleep(300 * time.Millisecond) // let the flood's signals settle
	for len(ch) > 0 {
		<-ch
	}
	testutil.IP(t, ns, "route", "add", "192.0.2.0/24", "via", "10.77.0.2")
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no signal for a route added after the overrun")
	}
}
