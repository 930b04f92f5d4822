// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"errors"
	"slices"
	"testing"

	"sluice/internal/testutil"
)

// TestStackDevices walks real stacks on the host kernel (which has veth,
// macvlan and VXLAN; 802.1Q and bonding only in the test VM, where
// TestGatewayQuirksBeneathVLAN covers them): a macvlan is read down to its
// port, a veth stays itself (its IFLA_LINK is its peer, which carries none
// of its frames out), a VXLAN too (its VTEP device is a routing hint), and
// a macvlan whose port is in another namespace is an error the caller
// fails closed on.
func TestStackDevices(t *testing.T) {
	ns, h := testutil.NewNetNS(t)
	other, _ := testutil.NewNetNS(t)
	testutil.IP(t, ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	testutil.IP(t, ns, "link", "add", "link", "v0", "name", "mv0", "type", "macvlan", "mode", "bridge")
	testutil.IP(t, ns, "link", "add", "vx0", "type", "vxlan", "id", "7", "dev", "v0", "dstport", "4789", "local", "10.9.0.1")
	testutil.IP(t, ns, "link", "add", "v2", "type", "veth", "peer", "name", "v3")
	testutil.IP(t, ns, "link", "set", "v3", "netns", other)
	testutil.IP(t, other, "link", "add", "link", "v3", "name", "mv3", "type", "macvlan")
	testutil.IP(t, other, "link", "set", "mv3", "netns", ns)

	walk := func(name string) ([]string, error) {
		var got []string
		var werr error
		if err := InNetns(h, func() error {
			devs, err := StackDevices(name)
			for _, d := range devs {
				got = append(got, d.Name+"/"+d.Driver)
			}
			werr = err
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got, werr
	}
	for name, want := range map[string][]string{
		"mv0": {"mv0/macvlan", "v0/veth"},
		"v0":  {"v0/veth"},
		"vx0": {"vx0/vxlan"},
	} {
		got, err := walk(name)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("StackDevices(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
	if got, err := walk("mv3"); !errors.Is(err, ErrLowerElsewhere) {
		t.Errorf("StackDevices(mv3), a macvlan whose port is in another namespace = %v, %v; want ErrLowerElsewhere", got, err)
	}
	if _, err := walk("nosuch"); err == nil {
		t.Error("StackDevices(nosuch) succeeded")
	}
}
