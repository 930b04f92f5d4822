// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/internal/swan"
)

// swanTunnels is the suite's tunnel count; SLUICE_SWAN_TUNNELS overrides it
// for the by-hand scale run recorded in docs/benchmarks.md.
func swanTunnels(t *testing.T) int {
	if v := os.Getenv("SLUICE_SWAN_TUNNELS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_SWAN_TUNNELS=%q", v)
		}
		return n
	}
	return 64
}

// xfrmPolicies parses `ip xfrm policy` into "dir src dst" lines, sorted,
// leaving out charon's per-socket IKE bypass policies.
func xfrmPolicies(t *testing.T, ns string) []string {
	t.Helper()
	var out []string
	var cur string
	for _, l := range strings.Split(run(t, "ip", "-n", ns, "xfrm", "policy", "show"), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 4 && f[0] == "src" && f[2] == "dst":
			cur = f[1] + " " + f[3]
		case len(f) >= 2 && f[0] == "dir" && cur != "":
			if f[1] != "in" && f[1] != "out" && f[1] != "fwd" {
				cur = "" // socket policies
				continue
			}
			out = append(out, f[1]+" "+cur)
			cur = ""
		}
	}
	sort.Strings(out)
	return out
}

// wantPolicies is what strongSwan installs for the spec's tunnels with
// policies_fwd_out = yes: out, in, fwd (in) and fwd (out) per child.
func wantPolicies(s *swan.Spec, skip map[int]bool) []string {
	var out []string
	for _, tn := range s.All() {
		if skip[tn.Index] {
			continue
		}
		l, r := tn.LocalTS.String(), tn.RemoteTS.String()
		out = append(out, "out "+l+" "+r, "in "+r+" "+l, "fwd "+r+" "+l, "fwd "+l+" "+r)
	}
	sort.Strings(out)
	return out
}

func diffSets(got, want []string) string {
	g, w := map[string]bool{}, map[string]bool{}
	for _, x := range got {
		g[x] = true
	}
	for _, x := range want {
		w[x] = true
	}
	var b strings.Builder
	n := 0
	for _, x := range want {
		if !g[x] && n < 5 {
			fmt.Fprintf(&b, "  missing %s\n", x)
			n++
		}
	}
	for _, x := range got {
		if !w[x] && n < 10 {
			fmt.Fprintf(&b, "  extra   %s\n", x)
			n++
		}
	}
	return b.String()
}

var spiRe = regexp.MustCompile(`spi 0x[0-9a-f]+`)

type explainJSON struct {
	Action string `json:"action"`
	Reason string `json:"reason"`
	Dir    string `json:"dir"`
	Policy *struct {
		Index    uint32 `json:"index"`
		Dir      string `json:"dir"`
		Selector string `json:"selector"`
	} `json:"policy"`
}

// TestSwanTunnelsMirroredByGateway: two charons (Debian strongSwan 5.9.8) in
// two namespaces bring up 64 IKEv2 PSK tunnels with the seed's proposals
// (AES-GCM ESP with ESN, kernel ESP), configured by `sluice swan gen
// --apply` and driven by `sluice swan up`; traffic through one tunnel passes
// and is ESP on the wire; `sluice gateway run` (policy-source: kernel) on gw0
// mirrors exactly the kernel's policies and follows terminate, re-initiate,
// rekey and down.
//
//	lan0 16.0.0.1 -- p1 [gw0] p0 123.0.0.1 ==== 64 tunnels ==== p0 123.0.0.2..65 [gw1] p1 -- lan1 48.0.0.1
func TestSwanTunnelsMirroredByGateway(t *testing.T) {
	l := newLab(t)
	bin := sluiceBin(t)
	n := swanTunnels(t)
	lan0, gw0, gw1, lan1 := l.netns(t), l.netns(t), l.netns(t), l.netns(t)
	veth(t, lan0, "l0", "10.0.0.1/24", gw0, "p1", "")
	veth(t, gw0, "p0", "", gw1, "p0", "")
	veth(t, gw1, "p1", "", lan1, "l1", "11.0.0.1/24")
	run(t, "ip", "-n", lan0, "addr", "add", "16.0.0.1/32", "dev", "lo")
	run(t, "ip", "-n", lan0, "route", "add", "default", "via", "10.0.0.254", "src", "16.0.0.1")
	run(t, "ip", "-n", lan1, "addr", "add", "48.0.0.1/32", "dev", "lo")
	run(t, "ip", "-n", lan1, "route", "add", "default", "via", "11.0.0.254", "src", "48.0.0.1")

	dir0, dir1 := t.TempDir(), t.TempDir()
	var ch [2]*swan.Charon
	uri := func(i int) string { return ch[i].URI }
	step(t, "sluice swan gen --apply configures both gateways", func(t *testing.T) {
		gen := []string{"swan", "gen", "--topology", "test0", "--tunnels", strconv.Itoa(n), "--hw-offload", "no", "--apply"}
		run(t, bin, append(gen, "--role", "gw0", "--netns", gw0, "-o", dir0)...)
		run(t, bin, append(gen, "--role", "gw1", "--netns", gw1, "-o", dir1, "--psk-file", filepath.Join(dir0, swan.PSKFile))...)
		if out := run(t, "ip", "-n", gw0, "route", "show", "default"); !strings.Contains(out, "via 10.10.10.10 dev dummy0") {
			t.Fatalf("gw0 default route (the seed's dummy0): %q", out)
		}
		if out := run(t, "ip", "-n", gw1, "-4", "-o", "addr", "show", "dev", "p0"); strings.Count(out, "inet 123.0.") != n {
			t.Fatalf("gw1 p0 has %d carriers, want %d", strings.Count(out, "inet 123.0."), n)
		}
	})
	step(t, "two charons start, each in its own netns, mount namespace and VICI socket", func(t *testing.T) {
		for i, ns := range []string{gw0, gw1} {
			c, err := swan.StartCharon(swan.CharonOptions{Dir: l.owner.TempDir(), NetNS: ns})
			if err != nil {
				t.Fatal(err)
			}
			ch[i] = c
			l.owner.Cleanup(func() {
				c.Stop()
				if l.owner.Failed() {
					l.owner.Logf("gw%d charon:\n%s", i, c.LogTail(40))
				}
			})
		}
	})

	// The gateway follows the kernel from before the first tunnel (not in the
	// scale run, which measures strongSwan alone).
	scale := os.Getenv("SLUICE_SWAN_TUNNELS") != ""
	bpffs := t.TempDir()
	run(t, "mount", "-t", "bpf", "bpf", bpffs)
	l.undo("umount", bpffs)
	pinDir := filepath.Join(bpffs, "sluice")
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	os.WriteFile(cfg, []byte("pin-dir: "+pinDir+"\npolicy-source: kernel\ninterfaces:\n  - name: p1\n    l2: fib\n  - name: p0\n    l2: fib\n"), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	daemon := exec.CommandContext(ctx, "ip", "netns", "exec", gw0, bin, "gateway", "run", "-f", cfg)
	var logs bytes.Buffer
	daemon.Stdout, daemon.Stderr = &logs, &logs
	if !scale {
		if err := daemon.Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if scale {
			return
		}
		try("ip", "netns", "exec", gw0, bin, "gateway", "stop", "--pin-dir", pinDir)
		cancel()
		daemon.Wait()
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	explain := func(t *testing.T, iface, src, dst string) explainJSON {
		t.Helper()
		out, err := try("ip", "netns", "exec", gw0, bin, "gateway", "explain", "--pin-dir", pinDir, "--json", "--iface", iface, "src", src, "dst", dst)
		var e explainJSON
		if err != nil || json.Unmarshal([]byte(out), &e) != nil {
			e.Reason = "error: " + strings.TrimSpace(out)
		}
		return e
	}
	// waitExplain polls until the packet's verdict satisfies ok.
	waitExplain := func(t *testing.T, what, iface, src, dst string, ok func(explainJSON) bool) explainJSON {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			e := explain(t, iface, src, dst)
			if ok(e) {
				return e
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: explain %s -> %s on %s says %+v (policy %+v)", what, src, dst, iface, e, e.Policy)
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	spec := &swan.Spec{Topology: swan.TopologyTest0, Role: swan.RoleGW0, Tunnels: n}
	spec.Normalize()
	isTunnelOut := func(i int) func(explainJSON) bool {
		tn := spec.Tunnel(0, i)
		sel := fmt.Sprintf("src %s dst %s", tn.LocalTS, tn.RemoteTS)
		return func(e explainJSON) bool {
			return e.Reason == "not-offloaded" && e.Policy != nil && e.Policy.Dir == "out" && e.Policy.Selector == sel
		}
	}
	hostIn := func(i int) string { return swan.RemoteNet(0, i).Addr().Next().String() }

	step(t, fmt.Sprintf("sluice swan up brings %d tunnels up", n), func(t *testing.T) {
		out := run(t, bin, "swan", "up", "--dir", dir1, "--uri", uri(1))
		if !strings.Contains(out, fmt.Sprintf("loaded %d connections and %d secrets", n, n)) {
			t.Fatalf("gw1 up:\n%s", out)
		}
		start := time.Now()
		out = run(t, bin, "swan", "up", "--dir", dir0, "--uri", uri(0), "--concurrency", "8", "--json")
		var res swan.UpResult
		if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &res); err != nil {
			t.Fatalf("up --json: %v\n%s", err, out)
		}
		if res.Established != n || res.Failed != 0 {
			t.Fatalf("gw0 up: %+v", res)
		}
		rss, _ := ch[0].RSSKiB()
		rss1, _ := ch[1].RSSKiB()
		t.Logf("SCALE: %d tunnels established in %.1fs (initiate %.1fs, concurrency %d); charon RSS gw0 %d KiB, gw1 %d KiB",
			n, time.Since(start).Seconds(), res.InitSeconds, res.Concurrency, rss, rss1)
		var st swan.Status
		if err := json.Unmarshal([]byte(run(t, bin, "swan", "status", "--dir", dir0, "--uri", uri(0), "--json")), &st); err != nil {
			t.Fatal(err)
		}
		if st.IKEEstablished != n || st.ChildInstalled != n {
			t.Fatalf("status: %d IKE_SAs, %d CHILD_SAs, want %d", st.IKEEstablished, st.ChildInstalled, n)
		}
		for _, sa := range st.SAs {
			if c := sa.Children[0]; c.EncrAlg != "AES_GCM_16" || c.EncrKey != 256 || c.Encap || c.Protocol != "ESP" {
				t.Fatalf("%s: %+v, want kernel ESP AES_GCM_16-256 without UDP encapsulation", sa.Name, c)
			}
		}
		if got, want := xfrmPolicies(t, gw0), wantPolicies(spec, nil); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("kernel policies on gw0 (%d) differ from the %d tunnels' (%d):\n%s", len(got), n, len(want), diffSets(got, want))
		}
	})
	if scale {
		return // the scale run stops at the numbers
	}

	step(t, "the gateway mirrors exactly the kernel's policies", func(t *testing.T) {
		// The kernel holds exactly the tunnels' policies (checked above);
		// packets of sampled tunnels, including the first and last, are
		// decided by that tunnel's OUT policy (a software SA: the kernel
		// encrypts); replies on the WAN are the kernel's (inbound); a /24 past
		// the last tunnel matches nothing. (Each explain loads the program:
		// ~2.5 s under TCG, so not all 64.)
		for _, i := range []int{1, 2, n / 2, n - 1, n} {
			waitExplain(t, fmt.Sprintf("tunnel %d", i), "p1", "16.0.0.1", hostIn(i), isTunnelOut(i))
		}
		if e := explain(t, "p0", hostIn(n), "16.0.0.1"); e.Reason != "inbound" {
			t.Fatalf("reply on the WAN: %+v", e)
		}
		if e := explain(t, "p1", "16.0.0.1", hostIn(n+1)); e.Reason != "no-policy" {
			t.Fatalf("a /24 without a tunnel: %+v (policy %+v)", e, e.Policy)
		}
	})
	step(t, "traffic through tunnel 1 passes and leaves as ESP only", func(t *testing.T) {
		// Outgoing only: a receiver's capture also shows the decrypted packet.
		capture := exec.Command("ip", "netns", "exec", gw0, "tcpdump", "-n", "-l", "-Q", "out", "-c", "3", "-i", "p0", "esp or icmp")
		var capOut bytes.Buffer
		capture.Stdout, capture.Stderr = &capOut, &capOut
		if err := capture.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // tcpdump under TCG is slow to start
		out, err := try("ip", "netns", "exec", lan0, "ping", "-c", "3", "-i", "0.3", "-W", "3", "48.0.0.1")
		done := make(chan error, 1)
		go func() { done <- capture.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			capture.Process.Kill()
			<-done
		}
		if err != nil {
			t.Fatalf("ping 16.0.0.1 -> 48.0.0.1 through tnl1: %v\n%s\ncapture:\n%s", err, out, capOut.String())
		}
		if strings.Count(capOut.String(), "123.0.0.1 > 123.0.0.2: ESP(spi=") != 3 || strings.Contains(capOut.String(), "ICMP") {
			t.Fatalf("gw0's WAN port sent:\n%s\nwant three ESP packets to 123.0.0.2 and no cleartext", capOut.String())
		}
	})

	const k = 5 // the tunnel that goes down, up and rekeys
	tk := spec.Tunnel(0, k)
	step(t, "swanctl --terminate: its policies leave the kernel and the mirror", func(t *testing.T) {
		run(t, "swanctl", "--terminate", "--ike", tk.Conn, "--uri", uri(0))
		waitExplain(t, "terminated", "p1", "16.0.0.1", hostIn(k), func(e explainJSON) bool { return e.Reason == "no-policy" })
		if got, want := xfrmPolicies(t, gw0), wantPolicies(spec, map[int]bool{k: true}); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("kernel policies after terminate:\n%s", diffSets(got, want))
		}
		waitExplain(t, "a neighbour", "p1", "16.0.0.1", hostIn(k+1), isTunnelOut(k+1))
	})
	step(t, "re-initiate: back in the kernel and the mirror", func(t *testing.T) {
		run(t, "swanctl", "--initiate", "--child", tk.Child, "--uri", uri(0))
		waitExplain(t, "re-initiated", "p1", "16.0.0.1", hostIn(k), isTunnelOut(k))
		if got, want := xfrmPolicies(t, gw0), wantPolicies(spec, nil); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("kernel policies after re-initiate:\n%s", diffSets(got, want))
		}
	})
	step(t, "rekey: new SAs, the mirror still resolves the tunnel", func(t *testing.T) {
		spis := func() string {
			out := run(t, "ip", "-n", gw0, "xfrm", "state", "list", "src", "123.0.0.1", "dst", tk.RemoteAddr.String())
			return strings.Join(spiRe.FindAllString(out, -1), " ")
		}
		before := spis()
		run(t, "swanctl", "--rekey", "--child", tk.Child, "--uri", uri(0))
		deadline := time.Now().Add(30 * time.Second)
		for spis() == before {
			if time.Now().After(deadline) {
				t.Fatalf("the outbound SA of %s never changed from %s", tk.Child, before)
			}
			time.Sleep(300 * time.Millisecond)
		}
		waitExplain(t, "rekeyed", "p1", "16.0.0.1", hostIn(k), isTunnelOut(k))
		if out, err := try("ip", "netns", "exec", lan0, "ping", "-c", "2", "-W", "3", "48.0.0.1"); err != nil {
			t.Fatalf("tunnel 1 after tunnel %d's rekey: %v\n%s", k, err, out)
		}
	})
	step(t, "sluice swan down: no tunnel policy left, the mirror empties", func(t *testing.T) {
		out := run(t, bin, "swan", "down", "--dir", dir0, "--uri", uri(0))
		if !strings.Contains(out, fmt.Sprintf("terminated %d IKE_SAs (0 failed), unloaded %d connections", n, n)) {
			t.Fatalf("down:\n%s", out)
		}
		if got := xfrmPolicies(t, gw0); len(got) != 0 {
			t.Fatalf("%d policies left after down:\n%s", len(got), strings.Join(got, "\n"))
		}
		waitExplain(t, "after down", "p1", "16.0.0.1", hostIn(1), func(e explainJSON) bool { return e.Reason == "no-policy" })
	})
}
