// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"sluice/internal/kernel/xfrm"
	"sluice/internal/testutil"
)

// BenchmarkSADeletionWindow measures what SACheckMirror leaves open: from
// the moment an SA delete is asked of the kernel to the moment the
// program's entry no longer names the SA (the kernel's XFRM_MSG_DELSA
// multicast, the watch, the mirror's event handling, one map write). The
// kernel deletes the SA inside the delete request, so this is an upper
// bound on the time a redirected frame can still meet a deleted SA. The
// SA is a larval state (XFRM_MSG_ALLOCSPI; the host kernel has no ESP
// type), which the kernel deletes and announces as it does a full one.
func BenchmarkSADeletionWindow(b *testing.B) {
	_, ns := testutil.NewNetNS(b)
	testutil.InNetnsHandle(b, ns, func() {
		if err := os.WriteFile("/proc/sys/net/core/xfrm_acq_expires", []byte("3600"), 0); err != nil {
			b.Fatal(err)
		}
		dp, err := Load(LoadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer dp.Close()
		if err := dp.SetSACheck(SACheckMirror); err != nil {
			b.Fatal(err)
		}
		pol := tunnelPolicy(xfrm.DirOut, "10.0.0.0/8", "48.0.1.0/24", 100, "123.2.0.1", 1, 1)
		st := saFor(pol, 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w, err := xfrm.HandleAt(ns).Watch(ctx)
		if err != nil {
			b.Fatal(err)
		}
		m := &Mirror{DP: dp}
		larval := &netlink.XfrmState{Src: net.IP(st.Src.AsSlice()), Dst: net.IP(st.Dst.AsSlice()), Proto: netlink.XFRM_PROTO_ESP,
			Mode: netlink.XFRM_MODE_TUNNEL}
		var request, event, withdraw time.Duration
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			// the kernel picks the SPI: the snapshot names the one it gave
			got, err := netlink.XfrmStateAllocSpi(larval)
			if err != nil {
				b.Fatalf("reserving an SPI: %v", err)
			}
			st.SPI = uint32(got.Spi)
			snap := Snapshot{Policies: []xfrm.Policy{pol}, States: []xfrm.State{st}, RouteMTU: routeMTUs([]xfrm.State{st}, 1500)}
			tables, err := Compile(snap)
			if err != nil {
				b.Fatal(err)
			}
			m.copy = mirrorCopy{}
			m.copy.load(snap)
			if err := dp.Apply(tables); err != nil { // names the SA
				b.Fatal(err)
			}
			b.StartTimer()
			t0 := time.Now()
			if err := xfrm.StateDelete(st.Dst, st.SPI); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			for ev := range w.Events {
				if ev.Kind == xfrm.StateDel && ev.State != nil && ev.State.SPI == st.SPI {
					t2 := time.Now()
					m.applyEvent(ev)
					t3 := time.Now()
					request += t1.Sub(t0)
					event += t2.Sub(t1)
					withdraw += t3.Sub(t2)
					break
				}
			}
		}
		// where the time goes: the delete request's round trip (the kernel
		// deletes inside it), the event's arrival after it, the withdrawal
		b.ReportMetric(float64(request.Nanoseconds())/float64(b.N), "request-ns/op")
		b.ReportMetric(float64(event.Nanoseconds())/float64(b.N), "event-ns/op")
		b.ReportMetric(float64(withdraw.Nanoseconds())/float64(b.N), "withdraw-ns/op")
		b.StopTimer()
		var ref fastpathFpSaRef
		for s := range dp.saRefs {
			if err := dp.objs.SaRefs.Lookup(s, &ref); err != nil || ref.Sa[0].Family != 0 {
				b.Fatalf("slot %d still names the SA after the delete (%v)", s, err)
			}
		}
	})
}
