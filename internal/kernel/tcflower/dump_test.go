// SPDX-License-Identifier: Apache-2.0

package tcflower

import (
	"encoding/binary"
	"os/exec"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"

	"sluice/internal/testutil"
)

// flowerDumpMessage builds an RTM_NEWTFILTER body as the kernel dumps a
// flower filter: tcmsg, kind, chain, options with flags and two actions
// with their stats.
func flowerDumpMessage(handle uint32, pref uint16, chain, flags uint32, lastPackets uint32, pkt64 uint64) []byte {
	e := nlAppender{}
	e.b = append(e.b, 0, 0, 0, 0)
	e.b = binary.NativeEndian.AppendUint32(e.b, 3)
	e.b = binary.NativeEndian.AppendUint32(e.b, handle)
	e.b = binary.NativeEndian.AppendUint32(e.b, clsactIngress)
	e.b = binary.NativeEndian.AppendUint32(e.b, uint32(pref)<<16|uint32(htons(ethPIP)))
	e.str(nl.TCA_KIND, "flower")
	e.u32(nl.TCA_CHAIN, chain)
	opts := e.nest(nl.TCA_OPTIONS | nl.NLA_F_NESTED)
	e.attr(nl.TCA_FLOWER_KEY_IPV4_SRC, []byte{10, 0, 0, 0})
	e.u32(nl.TCA_FLOWER_FLAGS, flags)
	acts := e.nest(nl.TCA_FLOWER_ACT)
	for i, packets := range []uint32{99, lastPackets} {
		a := e.nest(uint16(i + 1))
		e.str(nl.TCA_ACT_KIND, "gact")
		st := e.nest(nl.TCA_ACT_STATS)
		basic := binary.NativeEndian.AppendUint64(nil, 1500*uint64(packets))
		basic = binary.NativeEndian.AppendUint32(basic, packets)
		e.attr(nl.TCA_STATS_BASIC, append(basic, 0, 0, 0, 0))
		e.attr(nl.TCA_STATS_BASIC_HW, make([]byte, 16))
		if i == 1 && pkt64 != 0 {
			e.attr(nl.TCA_STATS_PKT64, binary.NativeEndian.AppendUint64(nil, pkt64))
		}
		e.end(st)
		e.end(a)
	}
	e.end(acts)
	e.end(opts)
	return e.b
}

func TestParseFlowerHandle(t *testing.T) {
	h, ok := parseFlowerHandle(flowerDumpMessage(7, 49005, 1, nl.TCA_CLS_FLAGS_SKIP_HW, 42, 0))
	if want := (Installed{Chain: 1, Pref: 49005, Handle: 7, SkipHW: true, Packets: 42}); !ok || h != want {
		t.Fatalf("got %+v %v, want %+v", h, ok, want)
	}
	h, _ = parseFlowerHandle(flowerDumpMessage(8, 49004, 0, nl.TCA_CLS_FLAGS_SKIP_SW, 0xffffffff, 1<<33))
	if !h.SkipSW || h.SkipHW || h.Packets != 1<<33 {
		t.Fatalf("64-bit count or flags: %+v", h)
	}
	if _, ok := parseFlowerHandle(flowerDumpMessage(0, 49005, 0, 0, 0, 0)); ok {
		t.Fatal("a priority's header (handle 0) taken for a filter")
	}
	u32 := flowerDumpMessage(9, 1, 0, 0, 0, 0)
	copy(u32[20+4:], "u32\x00\x00\x00\x00")
	if _, ok := parseFlowerHandle(u32); ok {
		t.Fatal("a u32 filter taken for flower")
	}
}

// TestDumpFlowerEmptyAndMissing dumps a clsact ingress without filters
// (the host kernel has no flower) and a device that does not exist.
func TestDumpFlowerEmptyAndMissing(t *testing.T) {
	ns, h := testutil.NewNetNS(t)
	idx := clsactVeth(t, ns, h)
	var hs, none []Installed
	var derr, nerr error
	testutil.InNetnsHandle(t, h, func() {
		hs, derr = Dump(idx)
		none, nerr = Dump(1 << 30)
	})
	if derr != nil || len(hs) != 0 {
		t.Fatalf("empty ingress: %v %v", hs, derr)
	}
	if nerr == nil || len(none) != 0 {
		t.Fatalf("missing device: %v, no error", none)
	}
	t.Logf("missing device: %v", nerr)
}

// clsactVeth adds a veth pair v0/v1 in the namespace with a clsact qdisc
// on v0 and returns v0's ifindex.
func clsactVeth(t *testing.T, ns string, h netns.NsHandle) int {
	t.Helper()
	testutil.IP(t, ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	if out, err := exec.Command("tc", "-n", ns, "qdisc", "add", "dev", "v0", "clsact").CombinedOutput(); err != nil {
		t.Fatalf("clsact: %v %s", err, out)
	}
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	v0, err := nh.LinkByName("v0")
	if err != nil {
		t.Fatal(err)
	}
	return v0.Attrs().Index
}
