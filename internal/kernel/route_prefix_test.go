// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"sluice/internal/testutil"
)

// TestSourceAcceptedNeedsForwarding: a device with forwarding off makes
// XDP's FIB lookup (and the kernel) pass what arrives on it, so the flower
// tier must not forward it either.
func TestSourceAcceptedNeedsForwarding(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces")
	ns, err := NewNetns(func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	in := func(args ...string) { t.Helper(); runInNetns(t, ns, args...) }
	in("ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	in("ip", "link", "set", "v0", "up")
	check := func(src, wantWhy string) {
		t.Helper()
		var why string
		if err := InNetns(ns, func() error {
			l, err := netlink.LinkByName("v0")
			if err != nil {
				return err
			}
			_, why, err = SourceAccepted(netip.MustParsePrefix(src), l.Attrs().Index)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if wantWhy == "" && why != "" || !strings.Contains(why, wantWhy) {
			t.Errorf("SourceAccepted(%s, v0) says %q; want %q", src, why, wantWhy)
		}
	}
	check("10.1.0.0/24", "ipv4 forwarding is off on v0")
	check("2001:db8:1::/64", "ipv6 forwarding is off on v0")
	in("sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	check("10.1.0.0/24", "")
	check("2001:db8:1::/64", "")
}
