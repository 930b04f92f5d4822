// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/internal/testutil"
)

// sluiceBin builds the binary once per test run.
func sluiceBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	out, err := exec.Command("go", "build", "-o", bin, "sluice/cmd/sluice").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func inNS(t *testing.T, ns string, args ...string) string {
	return run(t, "ip", append([]string{"netns", "exec", ns}, args...)...)
}

// snmpCounter reads one counter of /proc/net/snmp in a namespace.
func snmpCounter(t *testing.T, ns, proto, field string) int {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(inNS(t, ns, "cat", "/proc/net/snmp")))
	var header []string
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != proto+":" {
			continue
		}
		if header == nil {
			header = f
			continue
		}
		for i, h := range header {
			if h == field {
				n, _ := strconv.Atoi(f[i])
				return n
			}
		}
	}
	t.Fatalf("%s %s not in /proc/net/snmp", proto, field)
	return 0
}

func rxPackets(t *testing.T, ns, dev string) int {
	n, err := strconv.Atoi(strings.TrimSpace(inNS(t, ns, "cat", "/sys/class/net/"+dev+"/statistics/rx_packets")))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestGatewayForwardsOverVeth runs `sluice gateway run` in a gateway
// namespace between a generator and a sink:
//
//	gen g0 10.0.0.1 -- lan0 10.0.0.254 [dut, XDP] wan0 123.0.0.1 -- s0 123.0.0.254 sink
//
// with a lab policy 10.0.0.0/8 -> 48.0.1.0/24 packet-offloaded on wan0.
func TestGatewayForwardsOverVeth(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces and XDP")
	bin := sluiceBin(t)
	tag := strconv.Itoa(os.Getpid())
	gen, dut, sink := "e2e-gen-"+tag, "e2e-dut-"+tag, "e2e-sink-"+tag
	for _, ns := range []string{gen, dut, sink} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { testutil.DeleteIPNetNS(t, ns) })
	}
	run(t, "ip", "-n", dut, "link", "add", "lan0", "type", "veth", "peer", "name", "g0", "netns", gen)
	run(t, "ip", "-n", dut, "link", "add", "wan0", "type", "veth", "peer", "name", "s0", "netns", sink)
	for _, c := range [][]string{
		{gen, "addr", "add", "10.0.0.1/24", "dev", "g0"}, {gen, "link", "set", "g0", "up"}, {gen, "link", "set", "lo", "up"},
		{gen, "route", "add", "default", "via", "10.0.0.254"},
		{dut, "addr", "add", "10.0.0.254/24", "dev", "lan0"}, {dut, "link", "set", "lan0", "up"},
		{dut, "addr", "add", "123.0.0.1/16", "dev", "wan0"}, {dut, "link", "set", "wan0", "up"},
		{dut, "route", "add", "48.0.0.0/8", "via", "123.0.0.254"}, {dut, "route", "add", "49.0.0.0/8", "via", "123.0.0.254"},
		{sink, "addr", "add", "123.0.0.254/16", "dev", "s0"}, {sink, "link", "set", "s0", "up"}, {sink, "link", "set", "lo", "up"},
		{sink, "addr", "add", "48.0.1.7/32", "dev", "lo"}, {sink, "route", "add", "10.0.0.0/8", "via", "123.0.0.1"},
	} {
		run(t, "ip", append([]string{"-n", c[0]}, c[1:]...)...)
	}
	inNS(t, dut, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	// A veth takes redirected frames from its peer only in NAPI mode (GRO on or XDP attached).
	inNS(t, sink, "ethtool", "-K", "s0", "gro", "on")
	inNS(t, gen, "ethtool", "-K", "g0", "gro", "on")
	// Resolve neighbours now, so the first pings don't go to the kernel for ARP.
	inNS(t, gen, "ping", "-c", "1", "-W", "2", "10.0.0.254")
	inNS(t, dut, "ping", "-c", "1", "-W", "2", "123.0.0.254")

	// `ip netns exec` hides /sys/fs/bpf (it remounts /sys), so the daemon and
	// the explain/stop commands share pins through a bpffs mounted elsewhere.
	bpffs := t.TempDir()
	run(t, "mount", "-t", "bpf", "bpf", bpffs)
	t.Cleanup(func() { exec.Command("umount", bpffs).Run() })
	pinDir := filepath.Join(bpffs, "sluice")
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	apiSock := filepath.Join(t.TempDir(), "sluice.sock")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`lab: true
policy-source: static
pin-dir: %s
api-socket: %s
lease: 1s
interfaces:
  - name: lan0
    l2: fib
  - name: wan0
    l2: fib
policies:
  - {dir: out, src: 10.0.0.0/8, dst: 48.0.1.0/24, priority: 100, peer: 123.0.0.254, local: 123.0.0.1, reqid: 1, offload: packet, offload-dev: wan0}
  - {dir: in, src: 48.0.1.0/24, dst: 10.0.0.0/8, priority: 100, peer: 123.0.0.254, local: 123.0.0.1, reqid: 1, offload: packet, offload-dev: wan0}
`, pinDir, apiSock)), 0o600)

	t.Run("explain with a static config needs no daemon", func(t *testing.T) {
		out := inNS(t, dut, bin, "gateway", "explain", "-f", cfg, "--iface", "lan0", "--json", "src", "10.0.0.1", "dst", "48.0.1.9", "ttl", "9")
		var d struct {
			Action string `json:"action"`
			Reason string `json:"reason"`
			Egress string `json:"egress"`
			Policy struct {
				Selector string `json:"selector"`
			} `json:"policy"`
			Out struct {
				TTL uint8 `json:"ttl"`
			} `json:"output_frame"`
		}
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if d.Action != "XDP_REDIRECT" || d.Reason != "forward-out" || d.Egress != "wan0" || d.Out.TTL != 8 ||
			d.Policy.Selector != "src 10.0.0.0/8 dst 48.0.1.0/24" {
			t.Fatalf("explain: %+v\n%s", d, out)
		}
	})

	var logs bytes.Buffer
	start := func() *exec.Cmd {
		d := exec.Command("ip", "netns", "exec", dut, bin, "gateway", "run", "-f", cfg)
		d.Stdout, d.Stderr = &logs, &logs
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		return d
	}
	daemon := start()
	t.Cleanup(func() {
		exec.Command("ip", "netns", "exec", dut, bin, "gateway", "stop", "--pin-dir", pinDir).Run()
		daemon.Process.Kill()
		daemon.Wait()
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	})
	explain := func(args ...string) string {
		out, _ := exec.Command("ip", append([]string{"netns", "exec", dut, bin, "gateway", "explain", "--pin-dir", pinDir}, args...)...).CombinedOutput()
		return string(out)
	}
	waitFor := func(reason string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(explain("--iface", "lan0", "src", "10.0.0.1", "dst", "48.0.1.9"), reason) {
			if time.Now().After(deadline) {
				t.Fatalf("explain never said %s:\n%s", reason, explain("--iface", "lan0", "src", "10.0.0.1", "dst", "48.0.1.9"))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("forward-out")
	if !strings.Contains(inNS(t, dut, "ip", "link", "show", "lan0"), "xdp") {
		t.Fatal("lan0 shows no XDP program")
	}

	const n = 50
	t.Run("matching traffic is forwarded by XDP, around the stack", func(t *testing.T) {
		fwd0, rx0 := snmpCounter(t, dut, "Ip", "ForwDatagrams"), rxPackets(t, sink, "s0")
		exec.Command("ip", "netns", "exec", gen, "ping", "-c", strconv.Itoa(n), "-i", "0.01", "-W", "1", "-q", "48.0.1.9").Run()
		fwd, rx := snmpCounter(t, dut, "Ip", "ForwDatagrams")-fwd0, rxPackets(t, sink, "s0")-rx0
		if rx < n {
			t.Fatalf("sink received %d packets, want >= %d", rx, n)
		}
		if fwd > 2 {
			t.Fatalf("the dut's kernel forwarded %d datagrams: the fast path did not take them", fwd)
		}
	})
	t.Run("non-matching traffic is forwarded by the kernel", func(t *testing.T) {
		fwd0 := snmpCounter(t, dut, "Ip", "ForwDatagrams")
		exec.Command("ip", "netns", "exec", gen, "ping", "-c", strconv.Itoa(n), "-i", "0.01", "-W", "1", "-q", "49.0.0.1").Run()
		if fwd := snmpCounter(t, dut, "Ip", "ForwDatagrams") - fwd0; fwd < n {
			t.Fatalf("kernel forwarded %d datagrams, want >= %d", fwd, n)
		}
	})
	t.Run("TTL 1 reaches the kernel, which answers time exceeded", func(t *testing.T) {
		out, _ := exec.Command("ip", "netns", "exec", gen, "ping", "-c", "2", "-t", "1", "-W", "1", "48.0.1.9").CombinedOutput()
		if !strings.Contains(string(out), "Time to live exceeded") {
			t.Fatalf("no ICMP time exceeded from the gateway:\n%s", out)
		}
	})
	t.Run("cleartext matching an IN policy on the WAN goes through the kernel", func(t *testing.T) {
		fwd0 := snmpCounter(t, dut, "Ip", "ForwDatagrams")
		exec.Command("ip", "netns", "exec", sink, "ping", "-c", "10", "-i", "0.01", "-W", "1", "-q", "-I", "48.0.1.7", "10.0.0.1").Run()
		if fwd := snmpCounter(t, dut, "Ip", "ForwDatagrams") - fwd0; fwd < 10 {
			t.Fatalf("kernel forwarded %d of 10 spoofed packets: XDP must not forward them", fwd)
		}
		if out := explain("--iface", "wan0", "src", "48.0.1.7", "dst", "10.0.0.1"); !strings.Contains(out, "inbound") {
			t.Fatalf("explain for the spoof:\n%s", out)
		}
	})
	t.Run("show gateway reads the daemon's counters over the API", func(t *testing.T) {
		out := run(t, bin, "show", "gateway", "--socket", apiSock, "--json")
		var st struct {
			Mirror struct {
				InSync           bool `json:"in_sync"`
				MirroredPolicies int  `json:"mirrored_policies"`
			} `json:"mirror"`
			Interfaces []struct {
				Name    string            `json:"name"`
				Reasons map[string]uint64 `json:"reasons"`
			} `json:"interfaces"`
			TopPolicies []struct {
				Packets uint64 `json:"packets"`
			} `json:"top_policies"`
			FlowCache struct {
				KeysL4 bool   `json:"keys_l4"`
				Hits   uint64 `json:"hits"`
				Fills  uint64 `json:"fills"`
			} `json:"flow_cache"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("show gateway --json: %v\n%s", err, out)
		}
		// The pings are one host pair under subnet policies: one entry,
		// refilled at most once a second, answers the rest.
		if fc := st.FlowCache; fc.KeysL4 || fc.Fills == 0 || fc.Hits < fc.Fills {
			t.Fatalf("flow cache %+v: want keys per host pair, and more hits than fills", fc)
		}
		if text := run(t, bin, "show", "gateway", "--socket", apiSock); !strings.Contains(text, "cache:   per host pair;") {
			t.Fatalf("show gateway lacks the cache line:\n%s", text)
		}
		if !st.Mirror.InSync || st.Mirror.MirroredPolicies != 2 {
			t.Fatalf("mirror state %+v, want in sync with 2 policies", st.Mirror)
		}
		var lanFwd uint64
		for _, i := range st.Interfaces {
			if i.Name == "lan0" {
				lanFwd = i.Reasons["forward-out"]
			}
		}
		if lanFwd < n {
			t.Fatalf("lan0 forward-out counter %d, want >= %d (the pings above):\n%s", lanFwd, n, out)
		}
		if len(st.TopPolicies) == 0 || st.TopPolicies[0].Packets < n {
			t.Fatalf("top policy counters %+v, want the OUT policy with >= %d packets", st.TopPolicies, n)
		}
	})
	t.Run("a killed daemon's fast path closes when its lease runs out", func(t *testing.T) {
		daemon.Process.Kill() // SIGKILL: no chance to close the fast path itself
		daemon.Wait()
		waitFor("not-ready")
		if !strings.Contains(inNS(t, dut, "ip", "link", "show", "lan0"), "xdp") {
			t.Fatal("the program must stay attached (pinned) after the daemon dies")
		}
	})
	t.Run("a restarted daemon adopts the pinned program and maps", func(t *testing.T) {
		daemon = start()
		waitFor("forward-out")
		rx0 := rxPackets(t, sink, "s0")
		exec.Command("ip", "netns", "exec", gen, "ping", "-c", "10", "-i", "0.01", "-W", "1", "-q", "48.0.1.9").Run()
		if rx := rxPackets(t, sink, "s0") - rx0; rx < 10 {
			t.Fatalf("after restart the sink received %d of 10", rx)
		}
	})
	t.Run("stop detaches", func(t *testing.T) {
		out := inNS(t, dut, bin, "gateway", "stop", "--pin-dir", pinDir)
		if !strings.Contains(out, "detached from lan0") || !strings.Contains(out, "detached from wan0") {
			t.Fatalf("stop said:\n%s", out)
		}
		if strings.Contains(inNS(t, dut, "ip", "link", "show", "lan0"), "xdp") {
			t.Fatal("lan0 still has an XDP program after stop")
		}
		if _, err := os.Stat(pinDir); !os.IsNotExist(err) {
			t.Fatalf("pin dir %s left behind", pinDir)
		}
	})
}
