// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/gateway"
	"sluice/internal/testutil"
)

// trustGW is a gateway namespace (lan0, wan0, x0 veths) with a bpffs of
// its own, for the tests of what the daemon trusts and reports.
type trustGW struct {
	t     *testing.T
	bin   string
	ns    string
	bpffs string // a private bpffs mount (mode 1777, as the default mount)
	tmp   string // root's, reachable by uid 65534
}

func newTrustGW(t *testing.T) *trustGW {
	t.Helper()
	testutil.RequireRoot(t, "network namespaces, bpffs, XDP and another uid")
	g := &trustGW{t: t, bin: sluiceBin(t), ns: fmt.Sprintf("e2e-trust-%d-%d", os.Getpid(), rand.IntN(1<<20))}
	os.Chmod(filepath.Dir(g.bin), 0o755) // uid 65534 runs it too
	run(t, "ip", "netns", "add", g.ns)
	t.Cleanup(func() { testutil.DeleteIPNetNS(t, g.ns) })
	for _, c := range [][]string{
		{"link", "add", "wan0", "type", "veth", "peer", "name", "wan0p"},
		{"link", "add", "x0", "type", "veth", "peer", "name", "x0p"},
		{"addr", "add", "123.0.0.1/16", "dev", "wan0"},
		{"link", "set", "wan0", "up"}, {"link", "set", "wan0p", "up"}, {"link", "set", "x0", "up"}, {"link", "set", "x0p", "up"},
		{"neigh", "add", "123.0.0.254", "lladdr", "02:bb:00:00:00:01", "dev", "wan0", "nud", "permanent"},
		{"route", "add", "48.0.0.0/8", "via", "123.0.0.254"},
	} {
		run(t, "ip", append([]string{"-n", g.ns}, c...)...)
	}
	g.addLAN()
	inNS(t, g.ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	g.bpffs = t.TempDir()
	run(t, "mount", "-t", "bpf", "bpf", g.bpffs)
	t.Cleanup(func() { exec.Command("umount", "-l", g.bpffs).Run() })
	g.tmp = t.TempDir()
	os.Chmod(filepath.Dir(g.tmp), 0o755)
	os.Chmod(g.tmp, 0o755)
	return g
}

// addLAN creates lan0 (again: a re-created interface gets a new ifindex).
func (g *trustGW) addLAN() {
	for _, c := range [][]string{
		{"link", "add", "lan0", "type", "veth", "peer", "name", "lan0p"},
		{"addr", "add", "10.0.0.254/24", "dev", "lan0"},
		{"link", "set", "lan0", "up"}, {"link", "set", "lan0p", "up"},
	} {
		run(g.t, "ip", append([]string{"-n", g.ns}, c...)...)
	}
}

// config writes a gateway.yaml for pinDir and ifaces, readable by anyone.
func (g *trustGW) config(name, pinDir, extra string, ifaces ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "lab: true\npolicy-source: static\npin-dir: %s\nlease: 1s\napi-socket: %s\n%s\ninterfaces:\n", pinDir, filepath.Join(g.tmp, name+".sock"), extra)
	for _, i := range ifaces {
		fmt.Fprintf(&b, "  - name: %s\n    l2: fib\n", i)
	}
	if strings.Contains(strings.Join(ifaces, " "), "wan0") {
		b.WriteString("policies:\n  - {dir: out, src: 10.0.0.0/8, dst: 48.0.1.0/24, priority: 100, peer: 123.0.0.254, local: 123.0.0.1, reqid: 1, offload: packet, offload-dev: wan0}\n")
	}
	cfg := filepath.Join(g.tmp, name+".yaml")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o644); err != nil {
		g.t.Fatal(err)
	}
	return cfg
}

// start runs a daemon and waits until its API says in sync; stop runs at
// cleanup.
func (g *trustGW) start(cfg, pinDir string) (*exec.Cmd, *testutil.SyncBuffer) {
	g.t.Helper()
	logs := &testutil.SyncBuffer{}
	d := exec.Command("ip", "netns", "exec", g.ns, g.bin, "gateway", "run", "-f", cfg)
	d.Stdout, d.Stderr = logs, logs
	if err := d.Start(); err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() {
		exec.Command("ip", "netns", "exec", g.ns, g.bin, "gateway", "stop", "--pin-dir", pinDir).Run()
		d.Process.Kill()
		d.Wait()
		if g.t.Failed() {
			g.t.Logf("daemon log (%s):\n%s", cfg, logs.String())
		}
	})
	g.waitFor("the daemon in sync", func() bool { s, err := g.status(cfg); return err == nil && s.Mirror.InSync })
	return d, logs
}

// gatewayRun runs a daemon expected to fail (in the namespace, as the
// user of the as prefix), and returns its output.
func (g *trustGW) gatewayRun(cfg string, as ...string) (string, error) {
	args := append(append([]string{"ip", "netns", "exec", g.ns}, as...), g.bin, "gateway", "run", "-f", cfg)
	c := exec.Command(args[0], args[1:]...)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(20 * time.Second):
		c.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("still running after 20s")
	}
}

type trustStatus struct {
	FastPathOpen bool   `json:"fast_path_open"`
	ClosedReason string `json:"closed_reason"`
	Pins         struct {
		OK bool `json:"ok"`
	} `json:"pins"`
	Interfaces []struct {
		Name     string `json:"name"`
		Attached bool   `json:"attached"`
		Problem  string `json:"problem"`
	} `json:"interfaces"`
	Mirror struct {
		InSync bool   `json:"in_sync"`
		State  string `json:"state"`
	} `json:"mirror"`
}

func (g *trustGW) status(cfg string) (trustStatus, error) {
	var s trustStatus
	sock := strings.TrimSuffix(cfg, ".yaml") + ".sock"
	out, err := exec.Command(g.bin, "show", "gateway", "--socket", sock, "--json").CombinedOutput()
	if err != nil {
		return s, fmt.Errorf("%v: %s", err, out)
	}
	return s, json.Unmarshal(out, &s)
}

func (g *trustGW) waitFor(what string, ok func() bool) {
	g.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			g.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// xdpProg is the id of the XDP program on dev in the namespace, "" if none.
func (g *trustGW) xdpProg(dev string) string {
	var links []struct {
		XDP *struct {
			Prog struct {
				ID int `json:"id"`
			} `json:"prog"`
		} `json:"xdp"`
	}
	out, err := exec.Command("ip", "-n", g.ns, "-j", "-d", "link", "show", dev).Output()
	if err != nil || json.Unmarshal(out, &links) != nil || len(links) == 0 || links[0].XDP == nil {
		return ""
	}
	return strconv.Itoa(links[0].XDP.Prog.ID)
}

// pinnedLinkID is the id of the BPF link pinned at path.
func pinnedLinkID(t *testing.T, path string) string {
	t.Helper()
	// bpftool exits 255 after printing a link whose device it cannot
	// name in its own namespace: read what it printed.
	out, _ := exec.Command("bpftool", "-j", "link", "show", "pinned", path).Output()
	var info struct {
		ID int `json:"id"`
	}
	if err := json.Unmarshal(out, &info); err != nil || info.ID == 0 {
		t.Fatalf("bpftool link show pinned %s: %v\n%s", path, err, out)
	}
	return strconv.Itoa(info.ID)
}

// asNobody prefixes a command to run it as uid/gid 65534 without
// capabilities: a real other local user.
var asNobody = []string{"setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--inh-caps=-all"}

// A local user cannot make one gateway's start act on another gateway's
// program, nor block starts with a message that blames a gateway: before,
// sluice took a pin dir that user created, followed a planted
// link_x0 -> <A's pin dir>/link_lan0 and replaced A's program on lan0
// while logging "attached x0", and a flock on a pre-created pin dir was
// reported as "another 'sluice gateway run'".
func TestGatewayPinDirTrust(t *testing.T) {
	g := newTrustGW(t)
	pinA := filepath.Join(g.bpffs, "gw-a")
	cfgA := g.config("a", pinA, "", "lan0", "wan0")
	g.start(cfgA, pinA)
	progA := g.xdpProg("lan0")
	if progA == "" {
		t.Fatal("gateway A attached nothing to lan0")
	}
	unchanged := func(t *testing.T, out string) {
		t.Helper()
		if p := g.xdpProg("lan0"); p != progA {
			t.Fatalf("A's program on lan0 changed from %s to %q:\n%s", progA, p, out)
		}
		if p := g.xdpProg("x0"); p != "" {
			t.Fatalf("x0 has program %s after a refused start:\n%s", p, out)
		}
		if s, err := g.status(cfgA); err != nil || !s.Mirror.InSync || !s.FastPathOpen {
			t.Fatalf("gateway A after the refused start: %+v %v", s, err)
		}
	}

	t.Run("a pin dir another user created and holds is refused naming its owner", func(t *testing.T) {
		pinB := filepath.Join(g.bpffs, "gw-b")
		if out, err := exec.Command(asNobody[0], append(asNobody[1:], "mkdir", pinB)...).CombinedOutput(); err != nil {
			t.Fatalf("uid 65534 could not create a directory in a 1777 bpffs: %v\n%s", err, out)
		}
		if out, err := exec.Command(asNobody[0], append(asNobody[1:], "ln", "-s", filepath.Join(pinA, "link_lan0"), filepath.Join(pinB, "link_x0"))...).CombinedOutput(); err != nil {
			t.Fatalf("planting the symlink: %v\n%s", err, out)
		}
		holder := exec.Command(asNobody[0], append(asNobody[1:], "flock", pinB, "sleep", "60")...)
		if err := holder.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { holder.Process.Kill(); holder.Wait() }()
		time.Sleep(200 * time.Millisecond) // flock(1) takes the lock
		out, err := g.gatewayRun(g.config("b", pinB, "", "x0"))
		if err == nil || !strings.Contains(out, "belongs to uid 65534") || strings.Contains(out, "another 'sluice gateway run'") {
			t.Fatalf("gateway run on a pin dir of uid 65534: %v, want a refusal naming the owner:\n%s", err, out)
		}
		unchanged(t, out)
	})

	t.Run("a symlink in our own pin dir is never followed", func(t *testing.T) {
		pinC := filepath.Join(g.bpffs, "gw-c")
		os.Mkdir(pinC, 0o700)
		os.Symlink(filepath.Join(pinA, "link_lan0"), filepath.Join(pinC, "link_x0"))
		out, err := g.gatewayRun(g.config("c", pinC, "", "x0"))
		if err == nil || !strings.Contains(out, "is a symlink") {
			t.Fatalf("gateway run with a symlink in the pin dir: %v\n%s", err, out)
		}
		unchanged(t, out)
		// stop of that pin dir leaves A's link alone too.
		stop, _ := exec.Command("ip", "netns", "exec", g.ns, g.bin, "gateway", "stop", "--pin-dir", pinC).CombinedOutput()
		unchanged(t, string(stop))
	})

	t.Run("a pinned link attached to another interface is not adopted", func(t *testing.T) {
		pinD := filepath.Join(g.bpffs, "gw-d")
		os.Mkdir(pinD, 0o700)
		// A's own link object, pinned under D's name for x0.
		run(t, "bpftool", "link", "pin", "id", pinnedLinkID(t, filepath.Join(pinA, "link_lan0")), filepath.Join(pinD, "link_x0"))
		got, err := g.gatewayRun(g.config("d", pinD, "", "x0"))
		if err == nil || !strings.Contains(got, "refusing to take it over") {
			t.Fatalf("gateway run over a link attached to lan0: %v\n%s", err, got)
		}
		unchanged(t, got)
	})
}

// Status is checked against the kernel's attachments: a link detached by
// hand is attached again, a deleted interface makes the port closed with
// the reason until it is re-created (then attached again), pins.ok recovers
// when hidden pins are visible again, and a removed API socket is
// published again. Before, status kept saying open and in sync with no
// program on the port, and pins.ok stayed false for ever.
func TestGatewayStatusFollowsAttachments(t *testing.T) {
	g := newTrustGW(t)
	pin := filepath.Join(g.bpffs, "gw")
	cfg := g.config("gw", pin, "", "lan0", "wan0")
	d, logs := g.start(cfg, pin)
	attached := func(s trustStatus, name string) bool {
		for _, i := range s.Interfaces {
			if i.Name == name {
				return i.Attached
			}
		}
		return false
	}

	t.Run("a link detached by hand is attached again", func(t *testing.T) {
		run(t, "bpftool", "link", "detach", "id", pinnedLinkID(t, filepath.Join(pin, "link_lan0")))
		g.waitFor("lan0 attached again", func() bool {
			s, err := g.status(cfg)
			return err == nil && g.xdpProg("lan0") != "" && attached(s, "lan0") && s.FastPathOpen
		})
		if !strings.Contains(logs.String(), "attached again") {
			t.Fatal("the re-attach was not logged")
		}
	})

	t.Run("a deleted interface is reported closed, then re-attached when re-created", func(t *testing.T) {
		run(t, "ip", "-n", g.ns, "link", "del", "lan0")
		g.waitFor("status closed with the reason", func() bool {
			s, err := g.status(cfg)
			return err == nil && !s.FastPathOpen && !s.Mirror.InSync && s.Mirror.State == "closed" &&
				strings.Contains(s.ClosedReason, "lan0") && !attached(s, "lan0")
		})
		sock := strings.TrimSuffix(cfg, ".yaml") + ".sock"
		text, _ := exec.Command(g.bin, "show", "gateway", "--socket", sock).CombinedOutput()
		for _, want := range []string{"CLOSED, closed", "closed:  not attached: lan0: the interface is gone", "native (NOT ATTACHED)"} {
			if !strings.Contains(string(text), want) {
				t.Errorf("show gateway does not say %q:\n%s", want, text)
			}
		}
		g.addLAN()
		g.waitFor("lan0 re-created and attached again", func() bool {
			s, err := g.status(cfg)
			return err == nil && g.xdpProg("lan0") != "" && attached(s, "lan0") && s.FastPathOpen && s.Mirror.InSync
		})
	})

	t.Run("pins.ok recovers when hidden pins are visible again", func(t *testing.T) {
		// In the daemon's mount namespace ('ip netns exec' made one).
		inMnt := []string{"nsenter", "--target", strconv.Itoa(d.Process.Pid), "--mount"}
		run(t, inMnt[0], append(inMnt[1:], "mount", "-t", "tmpfs", "tmpfs", pin)...)
		g.waitFor("pins.ok false under the mount", func() bool { s, err := g.status(cfg); return err == nil && !s.Pins.OK })
		run(t, inMnt[0], append(inMnt[1:], "umount", pin)...)
		g.waitFor("pins.ok true again", func() bool { s, err := g.status(cfg); return err == nil && s.Pins.OK })
	})

	t.Run("a removed API socket is published again", func(t *testing.T) {
		sock := strings.TrimSuffix(cfg, ".yaml") + ".sock"
		if err := os.Remove(sock); err != nil {
			t.Fatal(err)
		}
		g.waitFor("the socket published again", func() bool { _, err := g.status(cfg); return err == nil })
		if !strings.Contains(logs.String(), "published it again") {
			t.Fatal("the republish was not logged")
		}
	})
}

// The messages around starting and stopping say what happens: a user
// without capabilities is told which ones (not MEMLOCK), two concurrent
// stops both succeed (one said "did not exit within 10s ... nothing was
// detached" after 0.6 s while the other detached), and a daemon without a
// pid file is still stopped, as its warning promises.
func TestGatewayStartStopMessages(t *testing.T) {
	g := newTrustGW(t)

	t.Run("without CAP_BPF and CAP_NET_ADMIN the error names them", func(t *testing.T) {
		pin := filepath.Join(g.bpffs, "gw-nobody")
		out, err := g.gatewayRun(g.config("nobody", pin, "", "lan0"), asNobody...)
		if err == nil || !strings.Contains(out, "CAP_BPF") || !strings.Contains(out, "CAP_NET_ADMIN") || strings.Contains(out, "MEMLOCK") {
			t.Fatalf("gateway run as uid 65534: %v, want the missing capabilities named:\n%s", err, out)
		}
	})

	t.Run("explain without CAP_BPF names it too", func(t *testing.T) {
		pin := filepath.Join(g.bpffs, "gw-root-only")
		os.Mkdir(pin, 0o700)
		for _, args := range [][]string{
			{"-f", g.config("explain-nobody", pin, "", "lan0")}, // loads its own program
			{"--pin-dir", pin}, // reads a gateway's pinned maps
		} {
			cmd := append(append([]string{"ip", "netns", "exec", g.ns}, asNobody...), g.bin, "gateway", "explain", "--iface", "lan0")
			cmd = append(append(cmd, args...), "src", "10.0.0.1", "dst", "48.0.1.9")
			out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "CAP_BPF") || strings.Contains(string(out), "MEMLOCK") {
				t.Errorf("gateway explain %s as uid 65534: %v, want the missing capabilities named:\n%s", args[0], err, out)
			}
		}
	})

	t.Run("two concurrent stops both succeed and one detaches", func(t *testing.T) {
		pin := filepath.Join(g.bpffs, "gw-stop2")
		g.start(g.config("stop2", pin, "", "lan0"), pin)
		var wg sync.WaitGroup
		outs := make([]string, 2)
		errs := make([]error, 2)
		for i := range outs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b, err := exec.Command("ip", "netns", "exec", g.ns, g.bin, "gateway", "stop", "--pin-dir", pin).CombinedOutput()
				outs[i], errs[i] = string(b), err
			}()
		}
		wg.Wait()
		both := outs[0] + outs[1]
		if errs[0] != nil || errs[1] != nil || strings.Contains(both, "did not exit") || strings.Count(both, "detached from lan0") != 1 {
			t.Fatalf("concurrent stops: %v, %v\n--- first:\n%s--- second:\n%s", errs[0], errs[1], outs[0], outs[1])
		}
		if p := g.xdpProg("lan0"); p != "" {
			t.Fatalf("lan0 still has program %s", p)
		}
	})

	t.Run("a daemon without a pid file is stopped as its warning says", func(t *testing.T) {
		pin := filepath.Join(g.bpffs, "gw-nopid")
		pidFile := gateway.PIDFile(pin)
		// A directory where the pid file goes: the daemon cannot write it.
		if err := os.MkdirAll(pidFile, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(pidFile)
		_, logs := g.start(g.config("nopid", pin, "", "lan0"), pin)
		if !strings.Contains(logs.String(), "no pid file") || !strings.Contains(logs.String(), "by the pin dir's lock") {
			t.Fatalf("the daemon's warning:\n%s", logs.String())
		}
		start := time.Now()
		out, err := exec.Command("ip", "netns", "exec", g.ns, g.bin, "gateway", "stop", "--pin-dir", pin).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "signalled daemon") || !strings.Contains(string(out), "detached from lan0") {
			t.Fatalf("stop of a daemon without a pid file after %s: %v\n%s", time.Since(start).Round(time.Millisecond), err, out)
		}
	})
}
