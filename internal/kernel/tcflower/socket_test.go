// SPDX-License-Identifier: Apache-2.0

package tcflower

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/vishvananda/netns"

	"sluice/internal/testutil"
)

// TestFlowerSocketAnswersEveryRequest sends more than a batch of requests
// that the kernel refuses in two different ways, alternately (a device
// that does not exist; on the host kernel, which has no flower, an unknown
// filter kind on one that does, and where flower exists a duplicate
// handle), and checks that each request gets its own answer, in order,
// with the kernel's message.
func TestFlowerSocketAnswersEveryRequest(t *testing.T) {
	ns, h := testutil.NewNetNS(t)
	fs := openFlowerSocketIn(t, h)
	idx := clsactVeth(t, ns, h)
	const missing = 1 << 30 // no such ifindex
	var fl []*Filter
	n := 3*Window + 5
	for i := range n {
		dev := idx
		if i%2 == 1 {
			dev = missing
		}
		fl = append(fl, &Filter{Ifindex: dev, Pref: 49005, Handle: 7, SkipHW: true,
			Src: netip.MustParsePrefix("10.0.0.0/24"), NoFrag: true, Actions: []Action{{Kind: ActRedirect, Ifindex: idx}}})
	}
	for _, del := range []bool{false, true} {
		errs, err := fs.run(fl, del)
		if err != nil {
			t.Fatalf("del=%v: socket error %v", del, err)
		}
		if len(errs) != n {
			t.Fatalf("del=%v: %d answers for %d requests", del, len(errs), n)
		}
		installed := 0
		for i, e := range errs {
			var fe *Error
			if i%2 == 1 {
				if !errors.As(e, &fe) || fe.Filter != fl[i] || fe.Errno != syscall.ENODEV {
					t.Fatalf("del=%v request %d (no such device): %v", del, i, e)
				}
				continue
			}
			if e == nil {
				installed++ // flower exists here: the first add, then its delete
				continue
			}
			if !errors.As(e, &fe) || fe.Filter != fl[i] || fe.Errno == syscall.ENODEV {
				t.Fatalf("del=%v request %d: %v", del, i, e)
			}
			if i == 0 {
				t.Logf("del=%v: the kernel refused with %v", del, e)
			}
		}
		if installed > 1 {
			t.Fatalf("del=%v: %d requests for one handle succeeded", del, installed)
		}
	}
}

func openFlowerSocketIn(t *testing.T, h netns.NsHandle) *Socket {
	t.Helper()
	var fs *Socket
	var err error
	testutil.InNetnsHandle(t, h, func() { fs, err = Open() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fs.Close)
	return fs
}
