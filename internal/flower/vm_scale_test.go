// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/fastpath"
	"sluice/internal/flower"
	"sluice/internal/kernel/tcflower"
	"sluice/internal/kernel/xfrm"
)

// TestFlowerScale installs the rules of N tunnels (SLUICE_FLOWER_SCALE,
// default 2,048: where fastSwan met ENOBUFS) with the installer and then
// with `tc -batch`, on a dummy port in software (skip_hw: the VM has no
// offload NIC), and checks by a dump that not one rule is lost or stale.
// It logs both rates; it asserts none (docs/benchmarks.md has the figures).
// flowerTunnel returns strongSwan's OUT and fwd-out policies for src->dst
// and the outbound SA, packet-offloaded on dev, as the mirror would hold
// them. A made-up snapshot on purpose: this test measures the installer
// (rules in and out of the kernel at 2,048 to 65,536 tunnels), which reads
// no SA; the NIC model holds 1,024 SAs per port (sa_budget) and installing
// 65,536 real ones would cost minutes that say nothing about the rules.
func flowerTunnel(index uint32, src, dst string, dev int) ([]xfrm.Policy, []xfrm.State) {
	local, peer := netip.MustParseAddr("123.0.0.1"), netip.MustParseAddr("123.0.0.2")
	tm := xfrm.Tmpl{Src: local, Dst: peer, Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, Reqid: index}
	out := xfrm.Policy{Index: index, Dir: xfrm.DirOut, Priority: 100,
		Sel:     xfrm.Selector{Src: netip.MustParsePrefix(src), Dst: netip.MustParsePrefix(dst)},
		Tmpls:   []xfrm.Tmpl{tm},
		Offload: &xfrm.Offload{Ifindex: dev, Flags: xfrm.OffloadPacket}}
	fwd := out
	fwd.Index, fwd.Dir, fwd.Offload = index+1, xfrm.DirFwd, nil
	opt := tm
	opt.Optional = true
	fwd.Tmpls = []xfrm.Tmpl{opt}
	// The SA's selector is the policy's, as strongSwan installs it: an
	// IPv4 SA carries IPv6 only with an IPv6 selector (xfrm_state_find).
	sa := xfrm.State{Src: local, Dst: peer, Proto: xfrm.ProtoESP, SPI: 0x1000 + index, Reqid: index, Mode: xfrm.ModeTunnel,
		Offload: &xfrm.Offload{Ifindex: dev, Flags: xfrm.OffloadPacket}, Sel: out.Sel}
	return []xfrm.Policy{out, fwd}, []xfrm.State{sa}
}

func TestFlowerScale(t *testing.T) {
	n := 2048
	if v := os.Getenv("SLUICE_FLOWER_SCALE"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	l := newLab(t)
	var gw string
	step(t, "topology", func(t *testing.T) {
		gw = l.netns(t)
		for _, d := range []string{"d0", "d1"} {
			run(t, "ip", "-n", gw, "link", "add", d, "type", "dummy")
			run(t, "ip", "-n", gw, "link", "set", d, "up")
		}
		run(t, "tc", "-n", gw, "qdisc", "add", "dev", "d0", "clsact")
		// Load the classifier and actions now: whichever method ran
		// first would otherwise pay for the module loads (seconds under
		// TCG) inside its timing.
		run(t, "modprobe", "-a", "cls_flower", "act_gact", "act_police", "act_vlan", "act_pedit", "act_csum", "act_mirred")
	})
	d0, _ := link(t, gw, "d0")
	d1, d1mac := link(t, gw, "d1")
	var snap fastpath.Snapshot
	for i := 0; i < n; i++ {
		lan := netip.PrefixFrom(netip.AddrFrom4([4]byte{16, byte(i >> 8), byte(i), 0}), 24)
		far := netip.PrefixFrom(netip.AddrFrom4([4]byte{48, byte(i >> 8), byte(i), 0}), 24)
		p, s := flowerTunnel(uint32(8*i+8), lan.String(), far.String(), d1)
		snap.Policies = append(snap.Policies, p...)
		snap.States = append(snap.States, s...)
	}
	nh := flower.NextHop{Ifindex: d1, Name: "d1", DstMAC: d1mac, SrcMAC: d1mac, MTU: 1500}
	start := time.Now()
	snap = withRouteMTU(snap)
	views := fastpath.PolicyViews(snap)
	viewsTook := time.Since(start)
	start = time.Now()
	res := flower.Derive(flower.Input{Views: views, Router: staticRouter{netip.MustParsePrefix("48.0.0.0/8"): nh}, InboundChain: 1,
		Ports: []flower.Port{{Name: "d0", Ifindex: d0, Outbound: true, TTL: true}, {Name: "d1", Ifindex: d1, L2FIB: true}}})
	deriveTook := time.Since(start)
	if len(res.Rules) != n+2 {
		t.Fatalf("derived %d rules for %d tunnels (skips %v)", len(res.Rules), n, res.Skips[:min(3, len(res.Skips))])
	}
	total := len(res.Rules)
	count := func() int {
		out := run(t, "tc", "-n", gw, "filter", "show", "dev", "d0", "ingress")
		return strings.Count(out, " handle 0x") // one header line per filter
	}
	var inst *flower.Installer
	fs := openTC(t, gw)
	var installTook, removeTook, batchTook time.Duration
	var installCPU, batchCPU cpuTime
	step(t, "installer: add all, none lost", func(t *testing.T) {
		inst = &flower.Installer{FS: fs, SkipHW: true}
		start, cpu0 := time.Now(), selfCPU()
		var st flower.Stats
		var errs []error
		var err error
		inNetns(t, gw, func() { st, errs, err = inst.Apply(res.Rules) })
		installTook, installCPU = time.Since(start), selfCPU().minus(cpu0)
		t.Logf("installer: %d rules in %v", total, installTook.Round(time.Millisecond))
		if err != nil || len(errs) > 0 || st.Added != total {
			t.Fatalf("apply: %+v, %d errors (first %v), %v", st, len(errs), errs[:min(1, len(errs))], err)
		}
		var removed, missing int
		inNetns(t, gw, func() {
			hs, derr := tcflower.Dump(d0)
			if derr != nil || len(hs) != total {
				t.Fatalf("dump: %d filters, want %d (%v)", len(hs), total, derr)
			}
			removed, missing, err = inst.Reconcile([]int{d0})
		})
		if err != nil || removed != 0 || missing != 0 {
			t.Fatalf("reconcile after install: removed %d, missing %d, %v", removed, missing, err)
		}
	})
	step(t, "installer: remove all", func(t *testing.T) {
		start := time.Now()
		var st flower.Stats
		var err error
		inNetns(t, gw, func() { st, _, err = inst.Apply(nil) })
		removeTook = time.Since(start)
		t.Logf("installer: removed %d rules in %v", total, removeTook.Round(time.Millisecond))
		if err != nil || st.Removed != total {
			t.Fatalf("remove: %+v %v", st, err)
		}
		if c := count(); c != 0 {
			t.Fatalf("%d filters left", c)
		}
	})
	step(t, "installer: a withdrawal during the apply waits for no more than a chunk", func(t *testing.T) {
		// The first forward (in key order) is withdrawn right after the
		// kernel took it, and at that moment the last one too: the first
		// must be removed before the apply goes on, the last never sent.
		var fwd []flower.Rule
		for _, r := range res.Rules {
			if r.Kind == flower.KindForward {
				fwd = append(fwd, r)
			}
		}
		slices.SortFunc(fwd, func(a, b flower.Rule) int { return strings.Compare(a.Key(), b.Key()) })
		first, last := fwd[0].PolicyIndex, fwd[len(fwd)-1].PolicyIndex
		asked := map[uint32]int{}
		killed := map[uint32]bool{}
		inst := &flower.Installer{FS: fs, SkipHW: true, Withdrawn: func(p uint32) bool {
			asked[p]++
			if p == first && asked[p] == 2 { // asked before sending, then once added
				killed[first], killed[last] = true, true
			}
			return killed[p]
		}}
		var st flower.Stats
		var errs []error
		var err error
		inNetns(t, gw, func() { st, errs, err = inst.Apply(res.Rules) })
		if err != nil || len(errs) > 0 || st.Added != total-2 {
			t.Fatalf("apply: %+v (want %d added), %d errors, %v", st, total-2, len(errs), err)
		}
		if asked[first] != 2 || asked[last] != 1 {
			t.Fatalf("Withdrawn asked %d times for the first forward (want 2: before and after), %d for the last (want 1: before)", asked[first], asked[last])
		}
		if c := count(); c != total-2 {
			t.Fatalf("%d filters on d0, want %d: a withdrawn forward is in the kernel", c, total-2)
		}
		inNetns(t, gw, func() { st, _, err = inst.Apply(nil) })
		if err != nil || count() != 0 {
			t.Fatalf("remove: %+v %v, %d left", st, err, count())
		}
	})
	step(t, "tc -batch: the same rules", func(t *testing.T) {
		var b strings.Builder
		for i, r := range res.Rules {
			b.WriteString(r.TCBatchLine(uint32(i+1), true))
			b.WriteByte('\n')
		}
		path := filepath.Join(t.TempDir(), "rules.tc")
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		cmd := exec.Command("tc", "-n", gw, "-batch", path)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tc -batch: %v\n%s", err, out)
		}
		batchTook = time.Since(start)
		batchCPU = cpuTime{user: cmd.ProcessState.UserTime(), sys: cmd.ProcessState.SystemTime()}
		t.Logf("tc -batch: %d rules in %v", total, batchTook.Round(time.Millisecond))
		var hs []tcflower.Installed
		inNetns(t, gw, func() { hs, _ = tcflower.Dump(d0) })
		if len(hs) != total {
			t.Fatalf("tc -batch installed %d of %d", len(hs), total)
		}
	})
	rate := func(d time.Duration) string { return strconv.Itoa(int(float64(total)/d.Seconds())) + " rules/s" }
	t.Logf("%d tunnels, %d rules: views %v, derive %v; installer add %v (%s), remove %v (%s); tc -batch add %v (%s)",
		n, total, viewsTook.Round(time.Millisecond), deriveTook.Round(time.Millisecond),
		installTook.Round(time.Millisecond), rate(installTook), removeTook.Round(time.Millisecond), rate(removeTook),
		batchTook.Round(time.Millisecond), rate(batchTook))
	// Where the time went: user (our Go code or tc's parsing) against
	// system (the kernel building the filters, for both the same work).
	t.Logf("cpu: installer add %v; tc -batch %v", installCPU, batchCPU)
}

// cpuTime is a process's CPU time, split into user and system.
type cpuTime struct{ user, sys time.Duration }

func (c cpuTime) minus(o cpuTime) cpuTime { return cpuTime{c.user - o.user, c.sys - o.sys} }

func (c cpuTime) String() string {
	return "user " + c.user.Round(time.Millisecond).String() + " sys " + c.sys.Round(time.Millisecond).String()
}

// selfCPU is this process's CPU time so far (every thread: the Go
// runtime's GC workers count too).
func selfCPU() cpuTime {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return cpuTime{time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())}
}
