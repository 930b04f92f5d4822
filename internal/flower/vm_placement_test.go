// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"sluice/internal/api"
	"sluice/internal/kernel/xfrm"
)

// TestFlowerPlacement runs a real gateway daemon with placement on
// (flower-promote-pps 20, counters read every 500 ms: the lab-only
// flower-test-placement-interval; promotion after 3 readings, demotion
// after 10) and a budget of one forwarding rule on
// the cleartext port, and moves traffic between two tunnels: short bursts
// to B do not promote it (hysteresis); steady traffic to A promotes A into
// the NIC tier; then A goes idle and B gets the traffic: B waits for room
// in the budget, A is demoted after its idle run and B promoted. At no
// sample are there two forwarding rules on the device.
//
// The lab puts the software flower rules where a NIC's rules are, in front
// of XDP: the gateway's p0 (parent of the flower port p0.502) carries no
// XDP program, and what sluice's rules leave is sent by a lab filter below
// sluice's priorities, untagged, through the veth nic0 to x0, a configured
// port with p0's MAC where XDP forwards it. So once A is in the NIC, XDP
// stops counting A's packets and only its rule does, as on hardware.
func TestFlowerPlacement(t *testing.T) {
	l := newLab(t)
	a, gw, b := l.netns(t), l.netns(t), l.netns(t)
	step(t, "topology", func(t *testing.T) {
		veth(t, a, "lan", "", gw, "p0", "")
		veth(t, gw, "wan0", "123.0.0.1/24", b, "wan0", "123.0.0.2/24")
		run(t, "ip", "-n", a, "link", "add", "link", "lan", "name", "lan.502", "type", "vlan", "id", "502")
		run(t, "ip", "-n", gw, "link", "add", "link", "p0", "name", "p0.502", "type", "vlan", "id", "502")
		for _, e := range [][3]string{{a, "lan.502", "10.0.0.1/24"}, {gw, "p0.502", "10.0.0.254/24"}} {
			run(t, "ip", "-n", e[0], "addr", "add", e[2], "dev", e[1])
			run(t, "ip", "-n", e[0], "link", "set", e[1], "up")
		}
		run(t, "ip", "-n", a, "route", "add", "48.0.0.0/8", "via", "10.0.0.254")
		run(t, "ip", "-n", b, "addr", "add", "48.0.1.1/32", "dev", "lo")
		run(t, "ip", "-n", b, "addr", "add", "48.0.2.1/32", "dev", "lo")
		run(t, "ip", "-n", gw, "route", "add", "48.0.0.0/8", "via", "123.0.0.2")
		// x0 stands for the NIC's host side: XDP runs there, on what the
		// flower rules leave. It answers to p0's MAC, as the real port would.
		_, p0MAC := link(t, gw, "p0")
		run(t, "ip", "-n", gw, "link", "add", "nic0", "type", "veth", "peer", "name", "x0")
		run(t, "ip", "-n", gw, "link", "set", "x0", "address", p0MAC.String())
		for _, dev := range []string{"nic0", "x0"} {
			run(t, "ip", "-n", gw, "link", "set", dev, "up")
		}
		nsRun(t, gw, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0")
		// GRO puts b's veth in NAPI mode: XDP's redirects to wan0 reach it.
		nsRun(t, b, "ethtool", "-K", "wan0", "gro", "on")
		nsRun(t, a, "ping", "-c", "1", "-W", "3", "10.0.0.254")
		nsRun(t, gw, "ping", "-c", "1", "-W", "3", "123.0.0.2")
		run(t, "tc", "-n", gw, "qdisc", "add", "dev", "p0", "clsact")
		run(t, "tc", "-n", gw, "filter", "add", "dev", "p0", "ingress", "pref", "60000", "protocol", "802.1Q",
			"flower", "vlan_id", "502", "vlan_ethtype", "ip", "dst_ip", "48.0.0.0/8",
			"action", "vlan", "pop", "pipe", "action", "mirred", "egress", "redirect", "dev", "nic0")
	})

	sock := filepath.Join(t.TempDir(), "api.sock")
	g := startGateway(t, l, gw, `lab: true
policy-source: static
api-socket: `+sock+`
metrics-listen: 127.0.0.1:9464
flower-test-skip-hw: true
flower-promote-pps: 20
flower-test-placement-interval: 500ms
interfaces:
  - {name: x0, l2: fib}
  - {name: p0.502, l2: fib, flower: outbound, flower-rule-budget: 1}
  - {name: wan0, l2: fib}
policies:
  - {dir: out, src: 10.0.0.0/24, dst: 48.0.1.0/24, priority: 100, peer: 123.0.0.2, local: 123.0.0.1, reqid: 1, offload: packet, offload-dev: wan0}
  - {dir: out, src: 10.0.0.0/24, dst: 48.0.2.0/24, priority: 100, peer: 123.0.0.2, local: 123.0.0.1, reqid: 2, offload: packet, offload-dev: wan0}
`)
	// The static source numbers policy i (from 1) as i<<3 | dir.
	A := placedTunnel{"A", uint32(1)<<3 | uint32(xfrm.DirOut), netip.MustParseAddr("48.0.1.1"), "dst_ip 48.0.1.0/24"}
	B := placedTunnel{"B", uint32(2)<<3 | uint32(xfrm.DirOut), netip.MustParseAddr("48.0.2.1"), "dst_ip 48.0.2.0/24"}
	p := placementProbe{t: t, g: g, sock: sock}
	const onFlower, waiting = "flower (p0.502) — placement: steady traffic", "waiting for room in the device's rule budget"

	// Every 250 ms for the whole test: never two forwarding rules on p0.
	stopSampling := p.sampleBudget(l)
	send, burst := startPacer(t, a, 100)

	step(t, "both tunnels start on XDP", func(t *testing.T) {
		p.until(t, 60*time.Second, "both tunnels placed on XDP as new", func(s placementState) bool {
			return strings.HasPrefix(s.tier[A.idx], "xdp — placement: ") && strings.HasPrefix(s.tier[B.idx], "xdp — placement: ")
		})
		if n := p.forwardRules(t); n != 0 {
			t.Fatalf("%d forwarding rules before any traffic", n)
		}
	})

	step(t, "brief bursts below the run length do not promote", func(t *testing.T) {
		before := p.quick(t).xdp[B.idx]
		for i := 0; i < 2; i++ {
			// 15 packets, however long a loaded guest takes to send them
			// (the test's sleep once let a stalled burst grow): 3 readings
			// in a row at 20 pps over 0.5 s intervals take ~30 packets, 20
			// even when one reading comes a whole interval late.
			burst(B.dst, 15)
			time.Sleep(1500 * time.Millisecond) // a reading below the threshold resets the run
		}
		s := p.state(t)
		if seen := s.xdp[B.idx] - before; seen < 10 {
			t.Fatalf("XDP counted %d of B's burst packets; the bursts did not reach it", seen)
		}
		if s.promotions != 0 || p.forwardRules(t) != 0 {
			t.Fatalf("bursts promoted a tunnel: %d promotions, rules:\n%s", s.promotions, p.rules(t))
		}
		mustContain(t, s.tier[B.idx], "xdp — placement: ")
	})

	// x is the tunnel placement promotes first, y the other.
	var x, y placedTunnel
	step(t, "both steady: one is promoted, the other waits for the budget", func(t *testing.T) {
		send(A.dst, B.dst) // 50 pps each
		s := p.until(t, 20*time.Second, "one promoted, the other waiting", func(s placementState) bool {
			return strings.HasPrefix(s.tier[A.idx], onFlower) && strings.Contains(s.tier[B.idx], waiting) ||
				strings.HasPrefix(s.tier[B.idx], onFlower) && strings.Contains(s.tier[A.idx], waiting)
		})
		x, y = A, B
		if strings.HasPrefix(s.tier[B.idx], onFlower) {
			x, y = B, A
		}
		// Both reached the run length in the same reading: promoting both
		// would overfill the budget (and leave one "in the NIC" without a rule).
		if s.promotions != 1 {
			t.Fatalf("%d promotions with a budget of 1", s.promotions)
		}
		t.Logf("%s promoted first", x.name)
	})

	step(t, "x alone steady stays in the NIC; XDP no longer sees its packets", func(t *testing.T) {
		send(x.dst)
		mustContain(t, p.rules(t), x.sel, "skip_hw", "Egress Redirect to device wan0")
		if strings.Contains(p.rules(t), y.sel) {
			t.Fatalf("%s has a rule too", y.name)
		}
		mustContain(t, p.explain(t, x.dst), "verdict: XDP_REDIRECT", "tier:    "+onFlower)
		// The rule serves x: XDP no longer sees its packets; the rule's
		// statistics count them, and placement reads those: x stays in the
		// NIC for longer than the idle run that would demote it.
		x0, r0 := p.quick(t).xdp[x.idx], pktCount(t, gw, "p0", "49004")
		time.Sleep(6 * time.Second) // 12 readings; 10 idle ones demote
		s := p.state(t)
		x1, r1 := s.xdp[x.idx], pktCount(t, gw, "p0", "49004")
		if x1 != x0 || r1-r0 < 150 {
			t.Fatalf("over 6 s of 100 pps to %s: XDP counted %d (want 0), the rule %d (want ~600)", x.name, x1-x0, r1-r0)
		}
		if !strings.HasPrefix(s.tier[x.idx], onFlower) || s.demotions != 0 {
			t.Fatalf("%s left the NIC under steady traffic: %q, %d demotions", x.name, s.tier[x.idx], s.demotions)
		}
		m := p.metrics(t)
		if m[`sluice_flower_events_total{event="promoted"}`] != 1 || m[`sluice_flower_events_total{event="added"}`] < 1 || m["sluice_flower_rules"] < 1 {
			t.Fatalf("Prometheus: %v", m)
		}
	})

	step(t, "x idle, y steady: y waits for the budget, x is demoted, y promoted", func(t *testing.T) {
		send(y.dst)
		p.until(t, 15*time.Second, y.name+" waiting for room in the budget", func(s placementState) bool {
			return strings.Contains(s.tier[y.idx], waiting)
		})
		if !strings.Contains(p.rules(t), x.sel) {
			t.Fatalf("%s lost its rule before its idle run ended:\n%s", x.name, p.rules(t))
		}
		p.until(t, 30*time.Second, x.name+" demoted and "+y.name+" promoted", func(s placementState) bool {
			return strings.HasPrefix(s.tier[y.idx], onFlower) && strings.HasPrefix(s.tier[x.idx], "xdp — placement: ")
		})
		s := p.state(t)
		if s.promotions != 2 || s.demotions != 1 {
			t.Fatalf("promotions %d demotions %d, want 2 and 1", s.promotions, s.demotions)
		}
		r := p.rules(t)
		mustContain(t, r, y.sel)
		if strings.Contains(r, x.sel) {
			t.Fatalf("%s's rule outlived its demotion:\n%s", x.name, r)
		}
		mustContain(t, p.explain(t, x.dst), "tier:    xdp — placement: ")
		x0, r0 := p.quick(t).xdp[y.idx], pktCount(t, gw, "p0", "49004")
		time.Sleep(2 * time.Second)
		x1, r1 := p.quick(t).xdp[y.idx], pktCount(t, gw, "p0", "49004")
		if x1 != x0 || r1-r0 < 50 {
			t.Fatalf("over 2 s of 100 pps to %s: XDP counted %d (want 0), the rule %d (want ~200)", y.name, x1-x0, r1-r0)
		}
		m := p.metrics(t)
		if m[`sluice_flower_events_total{event="promoted"}`] != 2 || m[`sluice_flower_events_total{event="demoted"}`] != 1 {
			t.Fatalf("Prometheus: %v", m)
		}
	})
	send()

	step(t, "the budget held at every sample", func(t *testing.T) {
		samples, worst, at := stopSampling()
		if samples < 40 {
			t.Fatalf("only %d samples of the rules", samples)
		}
		if worst > 1 {
			t.Fatalf("%d forwarding rules on p0 with a budget of 1:\n%s", worst, at)
		}
	})
}

// placedTunnel is one of the lab's tunnels: its policy, a destination
// inside it and its rule's selector as tc prints it.
type placedTunnel struct {
	name string
	idx  uint32
	dst  netip.Addr
	sel  string
}

// placementProbe reads the daemon's view of placement and the device.
type placementProbe struct {
	t    *testing.T
	g    *gateway
	sock string
}

// placementState is what `sluice show gateway --json` says of placement.
type placementState struct {
	tier                  map[uint32]string // policy -> "flower (port) — why" / "xdp — why"
	xdp                   map[uint32]uint64 // policy -> XDP's packet counter
	promotions, demotions uint64
}

// state is what `sluice show gateway --json` says.
func (p placementProbe) state(t *testing.T) placementState {
	t.Helper()
	s, err := p.read(true)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// quick is the same from the API directly: polling the CLI under TCG
// costs a process start each time.
func (p placementProbe) quick(t *testing.T) placementState {
	t.Helper()
	s, err := p.read(false)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (p placementProbe) read(viaCLI bool) (placementState, error) {
	var out []byte
	if viaCLI {
		o, err := try(p.g.bin, "show", "gateway", "--socket", p.sock, "--json")
		if err != nil {
			return placementState{}, fmt.Errorf("show gateway --json: %v\n%s", err, o)
		}
		out = []byte(o)
	} else {
		c := api.NewClient(p.sock)
		st, err := c.Gateway()
		if err != nil {
			return placementState{}, err
		}
		ps, err := c.Policies()
		if err != nil {
			return placementState{}, err
		}
		out, _ = json.Marshal(struct {
			*api.GatewayStatus
			Top []api.PolicyStat `json:"top_policies"`
		}{st, ps})
	}
	var js struct {
		Flower *struct {
			Promotions uint64 `json:"promotions"`
			Demotions  uint64 `json:"demotions"`
			Rules      []struct {
				Index  uint32 `json:"policy_index"`
				Port   string `json:"port"`
				Reason string `json:"reason"`
			} `json:"rules"`
			Skips []struct {
				Index  uint32 `json:"policy_index"`
				Reason string `json:"reason"`
			} `json:"skips"`
		} `json:"flower"`
		Top []struct {
			Index   uint32 `json:"index"`
			Packets uint64 `json:"packets"`
			Tier    string `json:"tier"`
		} `json:"top_policies"`
	}
	if err := json.Unmarshal(out, &js); err != nil {
		return placementState{}, fmt.Errorf("show gateway --json: %v\n%s", err, out)
	}
	if js.Flower == nil {
		return placementState{}, fmt.Errorf("show gateway --json has no flower tier:\n%s", out)
	}
	s := placementState{tier: map[uint32]string{}, xdp: map[uint32]uint64{}, promotions: js.Flower.Promotions, demotions: js.Flower.Demotions}
	// Every eligible policy is a rule (with why the NIC serves it) or a
	// skip (with why XDP does); the busiest also carry their tier.
	for _, r := range js.Flower.Rules {
		s.tier[r.Index] = "flower (" + r.Port + ") — " + r.Reason
	}
	for _, sk := range js.Flower.Skips {
		s.tier[sk.Index] = "xdp — " + sk.Reason
	}
	for _, pol := range js.Top {
		s.xdp[pol.Index] = pol.Packets
		if viaCLI && pol.Tier != s.tier[pol.Index] {
			return s, fmt.Errorf("show gateway --json: policy %d's tier %q is not its flower entry's %q", pol.Index, pol.Tier, s.tier[pol.Index])
		}
	}
	return s, nil
}

// until polls the state until ok, and fails after limit.
func (p placementProbe) until(t *testing.T, limit time.Duration, what string, ok func(placementState) bool) placementState {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		s, err := p.read(false) // the daemon may not answer yet
		if err == nil && ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s after %s (%v): tiers %v, promotions %d, demotions %d; rules:\n%s", what, limit, err, s.tier, s.promotions, s.demotions, p.rules(t))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (p placementProbe) rules(t *testing.T) string {
	t.Helper()
	return run(t, "tc", "-n", p.g.ns, "filter", "show", "dev", "p0", "ingress")
}

// forwardRules counts sluice's forwarding rules (the lab's own filter
// redirects to nic0, not wan0).
func (p placementProbe) forwardRules(t *testing.T) int {
	t.Helper()
	return strings.Count(p.rules(t), "Egress Redirect to device wan0")
}

func (p placementProbe) explain(t *testing.T, dst netip.Addr) string {
	t.Helper()
	return run(t, "ip", "netns", "exec", p.g.ns, p.g.bin, "gateway", "explain", "--pin-dir", p.g.pinDir, "--socket", p.sock,
		"--iface", "x0", "src", "10.0.0.1", "dst", dst.String(), "proto", "udp", "dport", "9000")
}

// sampleBudget counts sluice's forwarding rules on p0 every 250 ms until
// the returned function is called, which reports the samples taken, the
// most rules seen at once and the filters at that moment.
func (p placementProbe) sampleBudget(l *lab) func() (samples, worst int, at string) {
	var (
		mu      sync.Mutex
		n, most int
		atMost  string
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			out, err := try("tc", "-n", p.g.ns, "filter", "show", "dev", "p0", "ingress")
			if err != nil {
				continue
			}
			c := strings.Count(out, "Egress Redirect to device wan0")
			mu.Lock()
			n++
			if c > most {
				most, atMost = c, out
			}
			mu.Unlock()
		}
	}()
	var once sync.Once
	finish := func() {
		once.Do(func() {
			close(stop)
			<-done
		})
	}
	l.owner.Cleanup(finish)
	return func() (int, int, string) {
		finish()
		mu.Lock()
		defer mu.Unlock()
		return n, most, atMost
	}
}

var metricLineRe = regexp.MustCompile(`^(sluice_flower_\S+) (\S+)$`)

// metrics reads the daemon's Prometheus endpoint (inside its namespace)
// and returns the sluice_flower_* samples by series.
func (p placementProbe) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	var body string
	inNetns(t, p.g.ns, func() {
		c, err := net.DialTimeout("tcp", "127.0.0.1:9464", 5*time.Second)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		var sb strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			sb.WriteString(sc.Text() + "\n")
		}
		body = sb.String()
	})
	m := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if mm := metricLineRe.FindStringSubmatch(line); mm != nil {
			m[mm[1]], _ = strconv.ParseFloat(mm[2], 64)
		}
	}
	if len(m) == 0 {
		t.Fatalf("no sluice_flower_* metrics in:\n%s", body)
	}
	return m
}

// startPacer sends UDP datagrams from inside ns at pps, in turn to the
// addresses send last set (none: silent), until the test ends. burst sends
// exactly n to dst, then goes silent, and returns when they are sent: a
// burst's size does not depend on when a loaded test wakes up.
func startPacer(t *testing.T, ns string, pps int) (send func(...netip.Addr), burst func(dst netip.Addr, n int)) {
	t.Helper()
	var targets atomic.Pointer[[]netip.Addr]
	var left atomic.Int64 // packets left in a burst
	burstDone := make(chan struct{}, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	ready := make(chan error, 1)
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		h, err := netns.GetFromName(ns)
		if err == nil {
			err = netns.Set(h)
			h.Close()
		}
		var c net.PacketConn
		if err == nil {
			c, err = net.ListenPacket("udp4", ":0")
		}
		ready <- err
		if err != nil {
			return
		}
		defer c.Close()
		tick := time.NewTicker(time.Second / time.Duration(pps))
		defer tick.Stop()
		msg := []byte("sluice placement test")
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if dsts := targets.Load(); dsts != nil && len(*dsts) > 0 {
				dst := (*dsts)[n%len(*dsts)]
				c.WriteTo(msg, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9000)))
				if left.Load() > 0 && left.Add(-1) == 0 {
					targets.Store(nil)
					burstDone <- struct{}{}
				}
			}
		}
	}()
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(stop)
		<-done
	})
	send = func(dsts ...netip.Addr) { left.Store(0); targets.Store(&dsts) }
	burst = func(dst netip.Addr, n int) {
		left.Store(int64(n))
		targets.Store(&[]netip.Addr{dst})
		<-burstDone
	}
	return send, burst
}
