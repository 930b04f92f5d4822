// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"sluice/internal/api"
	"sluice/internal/fastpath"
	"sluice/internal/flower"
	"sluice/internal/kernel/tcflower"
	"sluice/internal/testutil"
)

// runTier runs the tier on a thread inside ns until the returned stop is
// called; stop waits for Run to return (it removes the rules first).
func runTier(t *testing.T, ns string, tier *flower.Tier) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err == nil {
			err = netns.Set(h)
		}
		if err != nil {
			done <- err
			return
		}
		done <- tier.Run(ctx)
	}()
	// Update before Run has set up is dropped: wait for it.
	deadline := time.Now().Add(10 * time.Second)
	for !tier.FlowerStatus().Enabled && time.Now().Before(deadline) {
		tier.Update(fastpath.Snapshot{})
		time.Sleep(50 * time.Millisecond)
	}
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("tier: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// skipsOf turns the tier's status skips back into Derive's.
func skipsOf(ss []api.FlowerSkip) []flower.Skip {
	out := make([]flower.Skip, 0, len(ss))
	for _, s := range ss {
		out = append(out, flower.Skip{PolicyIndex: s.PolicyIndex, Port: s.Port, Reason: s.Reason})
	}
	return out
}

// forwards counts sluice's forwarding filters on the gateway's p0.
func (f *flowerLab) forwards(t *testing.T) int {
	t.Helper()
	return strings.Count(run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress"), "Egress Redirect")
}

func (f *flowerLab) waitForwards(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for f.forwards(t) != n {
		if time.Now().After(deadline) {
			why := ""
			if f.tier != nil {
				why = fmt.Sprintf("tier: %+v\n", f.tier.FlowerStatus().Skips)
			}
			t.Fatalf("want %d forwarding filters, have %d:\n%s%s", n, f.forwards(t), why, run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startMirror runs the fast path's mirror of the gateway's real XFRM
// database, feeding tier, until stop is called or the test ends.
func (f *flowerLab) startMirror(t *testing.T, tier *flower.Tier) (stop func()) {
	t.Helper()
	dp, err := fastpath.Load(fastpath.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &testutil.SyncBuffer{}
	m := &fastpath.Mirror{DP: dp, Src: f.source(t), Tier: tier, Log: slog.New(slog.NewTextHandler(logs, nil))}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			dp.Close()
		})
	}
	// The mirror runs through the steps after this one.
	f.owner.Cleanup(func() {
		stop()
		if f.owner.Failed() {
			f.owner.Logf("mirror log:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(time.Minute)
	for !m.Status().InSync {
		if time.Now().After(deadline) {
			t.Fatalf("the mirror never got in sync: %+v", m.Status())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return stop
}

// flood sends UDP from ns to dst:port every 10 ms until the test ends:
// traffic in flight while the kernel changes, so that a window in which a
// stale rule sends cleartext to the wire shows on the wire's counter.
func flood(t *testing.T, ns string, dst netip.AddrPort) {
	t.Helper()
	t.Cleanup(send(t, ns, dst, 10*time.Millisecond))
}

// send sends UDP from ns to dst:port every interval until the returned
// stop is called.
func send(t *testing.T, ns string, dst netip.AddrPort, every time.Duration) (stop func()) {
	t.Helper()
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err == nil {
			err = netns.Set(h)
		}
		if err != nil {
			t.Error(err)
			return
		}
		c, err := net.Dial("udp", dst.String())
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				c.Write([]byte("sluice flower flood"))
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-done }) }
}

// TestFlowerFailClosed walks the failure modes of docs/flower.md, "Fail
// closed", on the NIC model: the gateway's kernel holds real tunnels
// packet-offloaded on the model's port, the fast path's mirror reads them
// and feeds the tier (skip_hw rules on p0 redirect into the port, the
// model encrypts), and each failure is a real kernel change. After each, no
// rule forwards what the kernel would no longer send through a
// packet-offloaded SA, and, with UDP flowing every 10 ms throughout, the
// model's wire carried ESP only: a rekey, a software SA, an SA deleted, the
// FWD check turning, the mirror closing the tier, a rename, a link down,
// the daemon stopped or killed send no cleartext. The one change that
// does is the OUT policy's deletion: the model's TX table loses the policy
// at once and sends what the stale rule still redirects as it is, until
// the event reaches the tier (docs/flower.md, "The window that remains");
// the test counts those packets and logs them.
//
// Under each mlx5 profile. First with the profile's own SA miss, which
// sends cleartext (no-tx-miss-rule): the tier puts no rule into wan0, and
// an SA deleted under the flow sends nothing in cleartext (a rule there
// sent 1 frame at 100 packets/s before the event withdrew it). Then with
// the model's SA misses dropped, every failure mode above.
func TestFlowerFailClosed(t *testing.T) { underEachProfile(t, testFlowerFailClosed) }

func testFlowerFailClosed(t *testing.T, profile string) {
	l := newLab(t)
	f := newFlowerLab(t, l, profile)
	flower.RefreshEvery = 500 * time.Millisecond
	t.Cleanup(func() { flower.RefreshEvery = 10 * time.Second })
	newTier := func() *flower.Tier {
		return &flower.Tier{SkipHW: true, InboundChain: 1, Router: f.router, Ports: []flower.PortConfig{
			{Name: "p0.502", Outbound: true, TTL: true}, {Name: "wan0", L2FIB: true}}}
	}
	tier := newTier()
	f.tier = tier
	stop := runTier(t, f.gw, tier)
	recv4 := listenUDP(t, f.b, "48.0.0.1:9999")
	v4 := netip.MustParseAddr("48.0.0.1")
	forwarded := func(t *testing.T) int {
		sendUDP(t, f.a, v4, 9999, 64, 2)
		return recv4()
	}
	// noLeak runs one change under the flood and fails if cleartext
	// crossed the wire meanwhile (the capture on b's port's tap).
	noLeak := func(t *testing.T, what string, change func(t *testing.T)) {
		t.Helper()
		w0 := f.wireMark(t)
		change(t)
		f.noCleartext(t, w0, what)
	}
	v4SPI := f.tunnels[0].spi
	// A new SA, as the IKE daemon adds one: a new SPI, since b's replay
	// window remembers the old one's sequence numbers.
	freshSA := func(t *testing.T) {
		v4SPI++
		f.peerSA(t, 10, v4SPI)
		f.sa(t, "add", 10, v4SPI)
	}
	step(t, "the profile's SA miss: no rule into wan0; an SA deleted under the flow sends no cleartext", func(t *testing.T) {
		f.startMirror(t, tier)
		flood(f.owner, f.a, netip.MustParseAddrPort("48.0.0.1:9998")) // through every step
		// The tier's first apply: every tunnel has a rule or a reason.
		deadline := time.Now().Add(15 * time.Second)
		for st := tier.FlowerStatus(); len(st.Skips)+len(st.Rules) < len(f.tunnels); st = tier.FlowerStatus() {
			if time.Now().After(deadline) {
				t.Fatalf("the tier did not apply the mirror's snapshot: %+v", st)
			}
			time.Sleep(100 * time.Millisecond)
		}
		noLeak(t, "SA deleted, the profile's SA miss", func(t *testing.T) {
			// A packet every millisecond around the deletion: the window a
			// rule would leave (the event's trip, milliseconds) then holds
			// several, where the flood's 10 ms often caught none.
			stop := send(t, f.a, netip.MustParseAddrPort("48.0.0.1:9996"), time.Millisecond)
			time.Sleep(200 * time.Millisecond)
			f.sa(t, "delete", 10, v4SPI)
			time.Sleep(500 * time.Millisecond) // the flow meets the missing SA
			stop()
			freshSA(t)
		})
		if st := tier.FlowerStatus(); !skipped(flower.Result{Skips: skipsOf(st.Skips)}, "no-tx-miss-rule") || f.forwards(t) != 0 {
			t.Fatalf("%d rules redirect into a device that sends an SA miss in cleartext; skips %+v", f.forwards(t), st.Skips)
		}
	})
	f.dropSAMisses(t, l)
	tier.Rederive() // the tier reads the device again on every apply
	enc0 := f.encrypted(t)
	step(t, "rules from the kernel's real SAs forward; the model encrypts", func(t *testing.T) {
		f.waitForwards(t, 2)
		if n := forwarded(t); n != 2 {
			t.Fatalf("forwarded %d of 2", n)
		}
		if n := f.encrypted(t) - enc0; n < 2 {
			t.Fatalf("the model encrypted %d packets", n)
		}
	})
	step(t, "rekey: a new offloaded SA, then the old one deleted; the rule stays", func(t *testing.T) {
		noLeak(t, "rekey", func(t *testing.T) {
			before := tier.FlowerStatus().RulesRemoved
			f.peerSA(t, 10, 0x7777)
			f.sa(t, "add", 10, 0x7777)
			f.sa(t, "delete", 10, v4SPI)
			v4SPI = 0x7777
			if n := forwarded(t); n != 2 {
				t.Fatalf("after the rekey %d of 2 forwarded", n)
			}
			if st := tier.FlowerStatus(); st.RulesRemoved != before || f.forwards(t) != 2 {
				t.Fatalf("a same-device rekey touched the rules: %+v", st)
			}
		})
	})
	srcSel, dstSel := f.sel(t, 10)
	for _, tc := range []struct {
		name           string
		change, revert func(t *testing.T)
	}{
		{"rekey: a software SA beside the offloaded one", func(t *testing.T) {
			run(t, "ip", "-n", f.gw, "xfrm", "state", "add", "src", "123.0.0.1", "dst", "123.0.0.2", "proto", "esp", "spi", "0x8888",
				"reqid", "10", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", labKey, "128", "sel", "src", srcSel, "dst", dstSel)
		}, func(t *testing.T) {
			run(t, "ip", "-n", f.gw, "xfrm", "state", "delete", "src", "123.0.0.1", "dst", "123.0.0.2", "proto", "esp", "spi", "0x8888")
		}},
		{"SA deleted", func(t *testing.T) { f.sa(t, "delete", 10, v4SPI) }, freshSA},
		{"SA hard-expired", func(t *testing.T) { f.sa(t, "update", 10, v4SPI, "limit", "time-hard", "1") }, freshSA},
		{"fwd-out policy turned into one that needs an SA", func(t *testing.T) {
			run(t, f.ip, "-n", f.gw, "xfrm", "policy", "update", "src", srcSel, "dst", dstSel, "dir", "fwd", "priority", "100",
				"tmpl", "src", "123.0.0.1", "dst", "123.0.0.2", "proto", "esp", "reqid", "10", "mode", "tunnel")
		}, func(t *testing.T) {
			run(t, f.ip, "-n", f.gw, "xfrm", "policy", "update", "src", srcSel, "dst", dstSel, "dir", "fwd", "priority", "100",
				"tmpl", "src", "123.0.0.1", "dst", "123.0.0.2", "proto", "esp", "reqid", "10", "mode", "tunnel", "level", "use")
		}},
	} {
		step(t, tc.name, func(t *testing.T) {
			noLeak(t, tc.name, func(t *testing.T) {
				tc.change(t)
				f.waitForwards(t, 1) // the IPv6 tunnel keeps its rule
				if n := forwarded(t); n != 0 {
					t.Fatalf("%d packets still forwarded by a stale rule", n)
				}
				tc.revert(t)
				f.waitForwards(t, 2)
				if n := forwarded(t); n != 2 {
					t.Fatalf("after the revert %d of 2 forwarded", n)
				}
			})
		})
	}
	step(t, "OUT policy deleted: the rule goes (the model sends cleartext until it does)", func(t *testing.T) {
		w0 := f.wireMark(t)
		f.policy(t, 10, "delete")
		f.waitForwards(t, 1)
		leaked := len(f.wireLeaks(t, w0))
		if n := forwarded(t); n != 0 {
			t.Fatalf("%d packets still forwarded by a stale rule", n)
		}
		if n := len(f.wireLeaks(t, w0)); n != leaked {
			t.Fatalf("cleartext kept crossing the wire after the rule went: %d, then %d", leaked, n)
		}
		testutil.WireAgrees(t, f.oracle, w0.m, f.b, "wan0", w0.before)
		t.Logf("OUT policy deleted under a 100 packets/s flow: %d cleartext packets crossed the wire before the event withdrew the rule", leaked)
		f.policy(t, 10, "add")
		f.waitForwards(t, 2)
	})
	step(t, "mirror overrun: Close removes every rule before it returns", func(t *testing.T) {
		noLeak(t, "close", func(t *testing.T) {
			tier.Close()
			if n := f.forwards(t); n != 0 {
				t.Fatalf("%d rules left after Close", n)
			}
			if out := run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress"); strings.TrimSpace(out) != "" {
				t.Fatalf("guards left:\n%s", out)
			}
			// The mirror's next successful publish re-derives.
			tier.Update(f.kernelSnap(t))
			f.waitForwards(t, 2)
		})
	})
	step(t, "interface renamed: its rules go; back under its name, they return", func(t *testing.T) {
		noLeak(t, "rename", func(t *testing.T) {
			run(t, "ip", "-n", f.gw, "link", "set", "p0.502", "name", "lan502")
			f.waitForwards(t, 0)
			run(t, "ip", "-n", f.gw, "link", "set", "lan502", "name", "p0.502")
			f.waitForwards(t, 2)
		})
	})
	step(t, "egress link down: the route under the SAs goes, and the rules with it", func(t *testing.T) {
		noLeak(t, "link down", func(t *testing.T) {
			run(t, "ip", "-n", f.gw, "link", "set", "wan0", "down")
			f.waitForwards(t, 0)
			if n := forwarded(t); n != 0 {
				t.Fatalf("%d packets left through a down link", n)
			}
		})
	})
	step(t, "link up: the kernel flushed the port's offloaded state without an event; the mirror dumped again, new SAs bring the rules back", func(t *testing.T) {
		// xfrm_dev_down (net/xfrm/xfrm_device.c) deletes every SA and
		// policy offloaded to a device that goes down, through
		// xfrm_dev_state_flush / xfrm_dev_policy_flush, which notify no
		// one. The watch reports the link going down as a resync, so the
		// running mirror dumps again (docs/fastpath.md, "A device going
		// down"); the IKE daemon installs new SAs and only those count.
		if out := run(t, "ip", "-n", f.gw, "xfrm", "state"); strings.TrimSpace(out) != "" {
			t.Fatalf("the kernel kept offloaded SAs of a device that went down:\n%s", out)
		}
		noLeak(t, "link up", func(t *testing.T) {
			run(t, "ip", "-n", f.gw, "link", "set", "wan0", "up")
			for _, tu := range f.tunnels {
				f.policy(t, tu.reqid, "add")
			}
			freshSA(t)
			f.peerSA(t, 20, 0x2014)
			f.sa(t, "add", 20, 0x2014)
			f.waitForwards(t, 2)
			if n := forwarded(t); n != 2 {
				t.Fatalf("after the link came back %d of 2 forwarded", n)
			}
		})
	})
	step(t, "daemon stopped: every rule is removed", func(t *testing.T) {
		noLeak(t, "stop", func(t *testing.T) {
			stop()
			if out := run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress"); strings.TrimSpace(out) != "" {
				t.Fatalf("filters left after stop:\n%s", out)
			}
		})
	})
	step(t, "daemon killed: its rules keep encrypting; an SA deleted meanwhile drops in the model; the next start removes them", func(t *testing.T) {
		noLeak(t, "killed", func(t *testing.T) {
			// A killed daemon's rules: installed and never removed.
			f.snap = f.kernelSnap(t)
			res := f.derive()
			inNetns(t, f.gw, func() {
				fs, err := tcflower.Open()
				if err != nil {
					t.Fatal(err)
				}
				defer fs.Close()
				if _, errs, err := (&flower.Installer{FS: fs, SkipHW: true}).Apply(res.Rules); err != nil || len(errs) > 0 {
					t.Fatalf("%v %v", errs, err)
				}
			})
			f.waitForwards(t, 2)
			if n := forwarded(t); n != 2 {
				t.Fatalf("the killed daemon's rules forwarded %d of 2", n)
			}
			// Nothing withdraws the rule now: the model's policy still
			// selects the traffic and, without an SA, drops it.
			f.sa(t, "delete", 10, v4SPI)
			if n := forwarded(t); n != 0 {
				t.Fatalf("%d packets arrived through a deleted SA", n)
			}
			next := newTier()
			runTier(t, f.gw, next)
			f.waitForwards(t, 0) // before any snapshot: the old rules are not trusted
		})
	})
}
