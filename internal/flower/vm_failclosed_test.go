// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"context"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"sluice/internal/fastpath"
	"sluice/internal/flower"
	"sluice/internal/kernel/tcflower"
	"sluice/internal/kernel/xfrm"
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
			t.Fatalf("want %d forwarding filters, have %d:\n%s", n, f.forwards(t), run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// edit returns a copy of the lab's snapshot changed by fn.
func (f *flowerLab) edit(fn func(s *fastpath.Snapshot)) fastpath.Snapshot {
	s := fastpath.Snapshot{Policies: append([]xfrm.Policy(nil), f.snap.Policies...), States: append([]xfrm.State(nil), f.snap.States...), RouteMTU: f.snap.RouteMTU}
	fn(&s)
	return s
}

// TestFlowerFailClosed walks the failure modes of docs/flower.md, "Fail
// closed": after each, no rule forwards what the kernel would no longer
// send through a packet-offloaded SA.
func TestFlowerFailClosed(t *testing.T) {
	l := newLab(t)
	f := newFlowerLab(t, l)
	flower.RefreshEvery = 500 * time.Millisecond
	newTier := func() *flower.Tier {
		return &flower.Tier{SkipHW: true, InboundChain: 1, Router: f.router, Ports: []flower.PortConfig{
			{Name: "p0.502", Outbound: true, TTL: true}, {Name: "wan0", L2FIB: true}}}
	}
	tier := newTier()
	stop := runTier(t, f.gw, tier)
	recv4 := listenUDP(t, f.b, "48.0.0.1:9999")
	v4 := netip.MustParseAddr("48.0.0.1")
	forwarded := func(t *testing.T) int {
		sendUDP(t, f.a, v4, 9999, 64, 2)
		return recv4()
	}
	step(t, "rules from the snapshot forward", func(t *testing.T) {
		tier.Update(f.snap)
		f.waitForwards(t, 2)
		if n := forwarded(t); n != 2 {
			t.Fatalf("forwarded %d of 2", n)
		}
	})
	step(t, "rekey: a new offloaded SA replaces the old, the rule stays", func(t *testing.T) {
		before := tier.FlowerStatus().RulesRemoved
		tier.Update(f.edit(func(s *fastpath.Snapshot) { s.States[0].SPI = 0x7777 }))
		time.Sleep(time.Second)
		if st := tier.FlowerStatus(); st.RulesRemoved != before || f.forwards(t) != 2 {
			t.Fatalf("a same-device rekey touched the rules: %+v", st)
		}
	})
	for _, tc := range []struct {
		name string
		edit func(s *fastpath.Snapshot)
	}{
		{"rekey: a software SA beside the offloaded one", func(s *fastpath.Snapshot) {
			sa := s.States[0]
			sa.SPI, sa.Offload = 0x8888, nil
			s.States = append(s.States, sa)
		}},
		{"SA deleted (or hard-expired: the mirror drops it the same way)", func(s *fastpath.Snapshot) { s.States = s.States[1:] }},
		{"OUT policy deleted", func(s *fastpath.Snapshot) { s.Policies = s.Policies[1:] }},
		{"fwd-out policy turned into one that needs an SA", func(s *fastpath.Snapshot) {
			s.Policies[1].Tmpls = []xfrm.Tmpl{s.Policies[0].Tmpls[0]}
		}},
	} {
		step(t, tc.name, func(t *testing.T) {
			tier.Update(f.edit(tc.edit))
			f.waitForwards(t, 1) // the IPv6 tunnel keeps its rule
			if n := forwarded(t); n != 0 {
				t.Fatalf("%d packets still forwarded by a stale rule", n)
			}
			tier.Update(f.snap)
			f.waitForwards(t, 2)
		})
	}
	step(t, "mirror overrun: Close removes every rule before it returns", func(t *testing.T) {
		tier.Close()
		if n := f.forwards(t); n != 0 {
			t.Fatalf("%d rules left after Close", n)
		}
		if out := run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress"); strings.TrimSpace(out) != "" {
			t.Fatalf("guards left:\n%s", out)
		}
		tier.Update(f.snap)
		f.waitForwards(t, 2)
	})
	step(t, "interface renamed: its rules go; back under its name, they return", func(t *testing.T) {
		run(t, "ip", "-n", f.gw, "link", "set", "p0.502", "name", "lan502")
		f.waitForwards(t, 0)
		run(t, "ip", "-n", f.gw, "link", "set", "lan502", "name", "p0.502")
		f.waitForwards(t, 2)
	})
	step(t, "egress link down: the kernel drops what the rule redirects", func(t *testing.T) {
		run(t, "ip", "-n", f.gw, "link", "set", "wan0", "down")
		if n := forwarded(t); n != 0 {
			t.Fatalf("%d packets left through a down link", n)
		}
		run(t, "ip", "-n", f.gw, "link", "set", "wan0", "up")
		run(t, "ip", "-n", f.b, "link", "set", "wan0", "up")
	})
	step(t, "daemon stopped: every rule is removed", func(t *testing.T) {
		stop()
		if out := run(t, "tc", "-n", f.gw, "filter", "show", "dev", "p0", "ingress"); strings.TrimSpace(out) != "" {
			t.Fatalf("filters left after stop:\n%s", out)
		}
	})
	step(t, "daemon killed: the next start removes the rules it left", func(t *testing.T) {
		// A killed daemon's rules: installed and never removed.
		res := f.derive()
		inNetns(t, f.gw, func() {
			fs, err := tcflower.OpenFlowerSocket()
			if err != nil {
				t.Fatal(err)
			}
			defer fs.Close()
			if _, errs, err := (&flower.Installer{FS: fs, SkipHW: true}).Apply(res.Rules); err != nil || len(errs) > 0 {
				t.Fatalf("%v %v", errs, err)
			}
		})
		f.waitForwards(t, 2)
		next := newTier()
		runTier(t, f.gw, next)
		f.waitForwards(t, 0) // before any snapshot: the old rules are not trusted
	})
}
