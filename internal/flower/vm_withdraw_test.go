// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"sluice/internal/fastpath"
	"sluice/internal/flower"
	"sluice/internal/kernel/tcflower"
	"sluice/internal/testutil"
)

var tookRe = regexp.MustCompile(`time=(\S+) .*rules withdrawn on an XFRM event.* took=(\S+)`)

// TestFlowerWithdrawsOnXFRMEvents: with the mirror's debounce at an hour,
// no publish and so no derive can follow a kernel change; only the
// event-driven withdrawal can remove a rule. The mirror reads the gateway's
// real SAs and policies, packet-offloaded on the NIC model's port (the
// model encrypts what the rules forward, b decrypts; the wire carries ESP
// only). Real `ip xfrm` changes in the gateway: a rekey (new SA, then the old one deleted) keeps the rule; an
// SA deletion, a policy deletion and an SA's hard expiry each remove it,
// and the packets it forwarded stop. The tier re-derives its (stale)
// snapshot every 300 ms meanwhile: a withdrawn rule must not come back
// from it. SLUICE_FLOWER_SCALE=N adds N-1 more real tunnels (default 256)
// and logs the window from the deletion to the rule's removal. Under each
// mlx5 profile (newFlowerLabOn; the extra tunnels are per host too under
// an exact-match one).
func TestFlowerWithdrawsOnXFRMEvents(t *testing.T) {
	underEachProfile(t, testFlowerWithdrawsOnXFRMEvents)
}

func testFlowerWithdrawsOnXFRMEvents(t *testing.T, profile string) {
	n := 256
	if v := os.Getenv("SLUICE_FLOWER_SCALE"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	l := newLab(t)
	f := newFlowerLab(t, l, profile)
	f.dropSAMisses(t, l)
	// The extra tunnels' source: the lab tunnel's (10.0.0.0/24, or
	// 10.0.0.1/32 per host).
	extraSrc, _ := f.sel(t, 10)
	flower.RefreshEvery = 300 * time.Millisecond
	if n > 4096 {
		// A derive of 65,536 tunnels allocates ~200 MB and takes seconds
		// in the VM: back to back, they starve the 2 GB guest.
		flower.RefreshEvery = 5 * time.Second
		// The guest has 2 GB; the kernel holds the rules and SAs too.
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(900 << 20))
	}
	t.Cleanup(func() { flower.RefreshEvery = 10 * time.Second })
	sa := func(t *testing.T, verb string, spi int, extra ...string) { f.sa(t, verb, 10, spi, extra...) }
	if n > 1000 {
		// The model holds sa_budget SAs per port (1,024 by default).
		run(t, "sh", "-c", fmt.Sprintf("echo %d > /sys/module/nicmodel/parameters/sa_budget", n+16))
		l.Undo("sh", "-c", "echo 1024 > /sys/module/nicmodel/parameters/sa_budget")
	}
	step(t, "tunnels in the gateway's XFRM database, packet-offloaded on the model", func(t *testing.T) {
		// The lab's tunnels (reqid 10: 10.0.0.0/24 -> 48.0.0.0/16; and
		// an IPv6 one), and N-1 more (a /32 each in 48.1/16), through
		// ip -batch.
		var b strings.Builder
		for i := 0; i < n-1; i++ {
			fmt.Fprintf(&b, "xfrm policy add src %s dst 48.1.%d.%d/32 dir out priority 100 tmpl src 123.0.0.1 dst 123.0.0.2 proto esp reqid %d mode tunnel offload packet dev wan0\n", extraSrc, i>>8, i&255, 100+i)
			fmt.Fprintf(&b, "xfrm state add src 123.0.0.1 dst 123.0.0.2 proto esp spi %d reqid %d mode tunnel aead rfc4106(gcm(aes)) %s 128 offload packet dev wan0 dir out\n", 0x10000+i, 100+i, labKey)
		}
		batch := t.TempDir() + "/xfrm.batch"
		if err := os.WriteFile(batch, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		run(t, f.ip, "-n", f.gw, "-batch", batch)
		t.Logf("%d tunnels' policies and SAs added in %v", n-1, time.Since(start))
	})
	dp, err := fastpath.Load(fastpath.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	h, err := netns.GetFromName(f.gw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	xh, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(xh.Close)
	src := f.source(t)
	logs := &testutil.SyncBuffer{}
	tier := &flower.Tier{SkipHW: true, InboundChain: 1, Router: f.router, Log: slog.New(slog.NewTextHandler(logs, nil)),
		Ports: []flower.PortConfig{{Name: "p0.502", Outbound: true, TTL: true}, {Name: "wan0", L2FIB: true}}}
	runTier(t, f.gw, tier)
	recv := listenUDP(t, f.b, "48.0.0.1:9999")
	forwarded := func() int {
		sendUDP(t, f.a, netip.MustParseAddr("48.0.0.1"), 9999, 64, 2)
		return recv()
	}
	// startMirror runs a mirror whose debounce never ends within the test:
	// its first publish (after the verified dump) is its only one.
	startMirror := func(t *testing.T) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		m := &fastpath.Mirror{DP: dp, Src: src, Tier: tier, Debounce: time.Hour, Log: slog.New(slog.NewTextHandler(logs, nil))}
		go func() { done <- m.Run(ctx) }()
		deadline := time.Now().Add(10 * time.Minute)
		for !m.Status().InSync {
			if time.Now().After(deadline) {
				t.Fatalf("the mirror never got in sync: %+v", m.Status())
			}
			time.Sleep(50 * time.Millisecond)
		}
		// An event that arrives during a publish waits for it.
		t.Logf("%d tunnels: the mirror's publish took %s", n, m.Status().LastSyncDuration)
		return func() { cancel(); <-done }
	}
	// measured finds the forwarding filter that carries 48.0.0.1 (the
	// one whose counter moves) once the tier has installed every rule.
	measured := func(t *testing.T) uint32 {
		t.Helper()
		deadline := time.Now().Add(10 * time.Minute)
		for {
			st := tier.FlowerStatus()
			if len(st.Rules) == n+1 && st.RulesInstalled >= n+1 { // and the IPv6 tunnel's
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d rules after 10 minutes (skips %v)", len(st.Rules), n, st.Skips[:min(3, len(st.Skips))])
			}
			time.Sleep(200 * time.Millisecond)
		}
		if got := forwarded(); got != 2 {
			t.Fatalf("the rule forwarded %d of 2", got)
		}
		var handle uint32
		inNetns(t, f.gw, func() {
			hs, err := tcflower.Dump(f.p0)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range hs {
				if x.Packets > 0 && x.Pref == flower.PrefForward {
					handle = x.Handle
				}
			}
		})
		if handle == 0 {
			t.Fatal("no forwarding filter counted the packets")
		}
		return handle
	}
	present := func(handle uint32) bool {
		_, err := try("tc", "-n", f.gw, "filter", "get", "dev", "p0", "ingress", "protocol", "802.1Q", "pref", fmt.Sprint(flower.PrefForward),
			"handle", fmt.Sprint(handle), "flower")
		return err == nil
	}
	// gone triggers a kernel change and waits for the rule to go. It logs
	// the window from the change's start to the rule's deletion (the
	// tier's log line's time) and the time inside the tier from the
	// event's arrival.
	gone := func(t *testing.T, handle uint32, what string, change func()) {
		t.Helper()
		before := len(tookRe.FindAllString(logs.String(), -1))
		added := tier.FlowerStatus().RulesAdded
		start := time.Now()
		change()
		for present(handle) {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("the rule outlived the kernel change by 5 s (the derive cannot run: only the event can remove it)\n%s", logs.String())
			}
		}
		var line []string
		for i := 0; i < 100 && line == nil; i++ {
			if m := tookRe.FindAllStringSubmatch(logs.String(), -1); len(m) > before {
				line = m[len(m)-1]
			} else {
				time.Sleep(10 * time.Millisecond)
			}
		}
		if line == nil {
			t.Fatalf("the rule went, but not by the event's withdrawal:\n%s", logs.String())
		}
		at, err := time.Parse(time.RFC3339Nano, line[1])
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d tunnels, %s: change -> rule deleted %v (event -> rule deleted inside the tier: %s)", n, what, at.Sub(start).Round(100*time.Microsecond), line[2])
		if got := forwarded(); got != 0 {
			t.Fatalf("%d packets still forwarded by a withdrawn rule", got)
		}
		// The tier re-derives its stale snapshot every 300 ms: once it has
		// (it lists the policy as withdrawn, or it re-added a rule), the
		// rule must still be out.
		deadline := time.Now().Add(5 * time.Minute)
		for st := tier.FlowerStatus(); !strings.Contains(fmt.Sprint(st.Skips), "withdrawn:") && st.RulesAdded == added; st = tier.FlowerStatus() {
			if time.Now().After(deadline) {
				t.Fatalf("no re-derive of the stale snapshot after the withdrawal (%d rules installed)", st.RulesInstalled)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if got := forwarded(); got != 0 {
			t.Fatalf("the re-derive of the stale snapshot brought the rule back: %d packets forwarded", got)
		}
	}
	// noLeak: no cleartext crossed the model's wire during a step (the
	// capture on b's port's tap says so; the model's counters must agree).
	noLeak := func(t *testing.T) func() {
		w0 := f.wireMark(t)
		return func() {
			f.noCleartext(t, w0, "the step's traffic")
			if t.Failed() {
				t.Logf("gateway port: %v", testutil.StatDelta(nil, testutil.EthStats(t, f.gw, "wan0"), "tx_cleartext_packets", "tx_link_local_packets", "tx_ipsec_drop_no_state"))
			}
		}
	}
	step(t, "rekey: a new offloaded SA, then the old one deleted, keeps the rule", func(t *testing.T) {
		defer noLeak(t)()
		stop := startMirror(t)
		defer stop()
		handle := measured(t)
		f.peerSA(t, 10, 0x2000)
		sa(t, "add", 0x2000)
		sa(t, "delete", f.tunnels[0].spi)
		sa(t, "update", 0x2000, "limit", "time-soft", "3600") // a changed SA that stays offloaded
		time.Sleep(time.Second)
		if !present(handle) || tier.FlowerStatus().RulesWithdrawn != 0 {
			t.Fatalf("a same-device rekey withdrew the rule (%d withdrawn)\n%s", tier.FlowerStatus().RulesWithdrawn, logs.String())
		}
		if got := forwarded(); got != 2 {
			t.Fatalf("after the rekey the rule forwarded %d of 2", got)
		}
	})
	step(t, "SA deleted: the rule goes with it", func(t *testing.T) {
		defer noLeak(t)()
		stop := startMirror(t)
		defer stop()
		handle := measured(t)
		gone(t, handle, "SA deleted", func() {
			if err := xh.XfrmStateDel(&netlink.XfrmState{Src: net.ParseIP("123.0.0.1"), Dst: net.ParseIP("123.0.0.2"), Proto: netlink.XFRM_PROTO_ESP, Spi: 0x2000}); err != nil {
				t.Fatal(err)
			}
		})
		f.peerSA(t, 10, 0x3000)
		sa(t, "add", 0x3000)
	})
	step(t, "OUT policy deleted: the rule goes with it", func(t *testing.T) {
		defer noLeak(t)()
		stop := startMirror(t)
		defer stop()
		handle := measured(t)
		gone(t, handle, "OUT policy deleted", func() {
			srcSel, dstSel := f.sel(t, 10)
			_, src, _ := net.ParseCIDR(srcSel)
			_, dst, _ := net.ParseCIDR(dstSel)
			if err := xh.XfrmPolicyDel(&netlink.XfrmPolicy{Src: src, Dst: dst, Dir: netlink.XFRM_DIR_OUT}); err != nil {
				t.Fatal(err)
			}
		})
		f.policy(t, 10, "add")
	})
	step(t, "SA hard-expired: the rule goes with it", func(t *testing.T) {
		defer noLeak(t)()
		stop := startMirror(t)
		defer stop()
		handle := measured(t)
		// A lifetime update (still offloaded: the rule stays), then expiry.
		gone(t, handle, "SA hard-expired (1 s after the update)", func() { sa(t, "update", 0x3000, "limit", "time-hard", "1") })
	})
	step(t, "the model encrypted the rules' packets", func(t *testing.T) {
		if f.encrypted(t) == 0 {
			t.Fatal("the model encrypted nothing: the rules' packets did not take the offloaded SAs")
		}
	})
}
