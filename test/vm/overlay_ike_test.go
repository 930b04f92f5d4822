// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

// The overlay keyed by IKE (host.yaml keying: ike): two hosts, each with
// its own charon, over the bond test's topology (two links each into a
// bridge, an active-backup bond). Phase 1: VXLAN over ESP transport with a
// PSK, offload none, a forced rekey. Phase 2: Geneve over ESP tunnel mode
// with certificates made by strongSwan's pki, host A's SAs crypto-offloaded
// to a netdevsim port that holds its tunnel address. Each phase: the wire
// carries ESP only, verify passes, teardown unloads the connections and
// leaves the namespaces as they were.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/internal/bench"
	"sluice/internal/swan"
)

// ikeVXLANHost is phase 1's host.yaml.
func ikeVXLANHost(name, uri string, me, other int) string {
	return fmt.Sprintf(`name: %s
uplinks:
  ports: [p0, p1]
  mtu: 1600
  bond: {name: bond0, miimon: 100, primary: p0}
  addresses: [192.168.70.%d/24]
vteps:
  - name: vx0
    vni: 1024
    local: 192.168.80.%d
    remotes: [{address: 192.168.80.%d, via: 192.168.70.%d}]
    addresses: [192.168.90.%d/24]
ipsec:
  keying: ike
  ike: {vici: "%s", psk: ike.psk, rekey-time: 1h}
  peers:
    - name: peer
      local: 192.168.80.%d
      remote: 192.168.80.%d
      esn: true
      replay-window: 128
`, name, me, me, other, other, me, uri, me, other)
}

// ikeGeneveHost is phase 2's host.yaml: tunnel endpoints tepMe/tepOther
// (A's on a netdevsim port, B's its bond address), the Geneve VTEPs on lo
// as the tunnel's selectors.
func ikeGeneveHost(name, uri string, me, other int, tepMe, tepOther, offload string) string {
	return fmt.Sprintf(`name: %s
uplinks:
  ports: [p0, p1]
  mtu: 1600
  bond: {name: bond0, miimon: 100, primary: p0}
  addresses: [192.168.70.%d/24]
vteps:
  - name: gnv0
    type: geneve
    vni: 77
    local: 192.168.81.%d
    remotes: [{address: 192.168.81.%d, via: 192.168.70.%d}]
    addresses: [192.168.91.%d/24]
ipsec:
  keying: ike
  ike: {vici: "%s", ca: ca.pem, cert: %s.pem, private-key: %s.key, rekey-time: 1h}
  peers:
    - name: peer
      local: %s
      remote: %s
      mode: tunnel
      selectors: [{local: 192.168.81.%d/32, remote: 192.168.81.%d/32}]
%s`, name, me, me, other, other, me, uri, name, name, tepMe, tepOther, me, other, offload)
}

// wireOnlyESP captures the switch while traffic runs and fails on any
// packet that is neither ESP nor IKE.
func wireOnlyESP(t *testing.T, sw string, traffic func()) {
	t.Helper()
	out := captureWire(t, sw, "br0", "ip and not udp port 500 and not udp port 4500", 10, traffic)
	var esp, other int
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(l, "ESP(spi="):
			esp++
		case strings.Contains(l, " > ") && strings.Contains(l, "ethertype IPv4"):
			other++
			t.Errorf("not ESP on the wire: %s", l)
		}
	}
	if esp == 0 {
		t.Fatalf("no ESP captured:\n%s", out)
	}
}

func pki(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "pki "+strings.Join(args, " "))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pki %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestOverlayIKE(t *testing.T) {
	if _, err := exec.LookPath("pki"); err != nil {
		t.Fatal("strongSwan's pki is missing: make setup installs strongswan-pki")
	}
	l := newLab(t)
	dir := t.TempDir()
	var a, b ovHost
	var sw string
	var ch [2]*swan.Charon
	step(t, "two hosts with a charon each, two links each through a bridge", func(t *testing.T) {
		a = ovHost{ns: l.netns(t), name: "ike-a"}
		b = ovHost{ns: l.netns(t), name: "ike-b"}
		sw = l.netns(t)
		run(t, "ip", "-n", sw, "link", "add", "br0", "type", "bridge")
		run(t, "ip", "-n", sw, "link", "set", "br0", "up")
		for _, h := range []struct{ ns, side string }{{a.ns, "a"}, {b.ns, "b"}} {
			for _, i := range []string{"0", "1"} {
				veth(t, h.ns, "p"+i, "", sw, h.side+i, "")
				run(t, "ip", "-n", sw, "link", "set", h.side+i, "mtu", "9000")
				run(t, "ip", "-n", sw, "link", "set", h.side+i, "master", "br0")
			}
		}
		for i, ns := range []string{a.ns, b.ns} {
			c, err := swan.StartCharon(swan.CharonOptions{Dir: l.owner.TempDir(), NetNS: ns})
			if err != nil {
				t.Fatal(err)
			}
			ch[i] = c
			l.owner.Cleanup(func() {
				if l.owner.Failed() {
					l.owner.Logf("charon %d:\n%s", i, c.LogTail(60))
				}
				c.Stop()
			})
		}
		// A's PSK file starts readable by its group.
		ovWrite(t, filepath.Join(dir, "ike.psk"), "0x5ec1e75ec1e75ec1e75ec1e75ec1e7aa5ec1e75ec1e75ec1e75ec1e75ec1e7aa\n", 0o640)
		a.file = filepath.Join(dir, "ike-a.yaml")
		b.file = filepath.Join(dir, "ike-b.yaml")
		ovWrite(t, a.file, ikeVXLANHost("ike-a", ch[0].URI, 1, 2), 0o644)
		ovWrite(t, b.file, ikeVXLANHost("ike-b", ch[1].URI, 2, 1), 0o644)
	})
	beforeA, beforeB := ikeNSState(t, a.ns), ikeNSState(t, b.ns)

	step(t, "transport+VXLAN, PSK: a group-readable PSK file is refused", func(t *testing.T) {
		out, err := ovSluice(t, a.ns, "plan", "-f", a.file)
		if err == nil || !strings.Contains(out, "has mode 0640") || !strings.Contains(out, "chmod 600") || strings.Contains(out, "5ec1e7") {
			t.Fatalf("plan with a 0640 PSK file: %v\n%s", err, out)
		}
		if err := os.Chmod(filepath.Join(dir, "ike.psk"), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	step(t, "transport+VXLAN, PSK: dry run shows the swanctl config, no secret", func(t *testing.T) {
		out := ovMust(t, a.ns, "apply", "--dry-run", "-f", a.file)
		t.Logf("%s", out)
		mustContain(t, out, "mode = transport", "local_ts = 192.168.80.1/32", "esp_proposals = aes128gcm16-x25519-esn", "replay_window = 128", "secret = <redacted: read from")
		if strings.Contains(out, "5ec1e7") {
			t.Fatal("the dry run shows the PSK")
		}
	})
	step(t, "transport+VXLAN, PSK: apply both, IKE comes up", func(t *testing.T) {
		t.Logf("A:\n%s", ovMust(t, a.ns, "apply", "-f", a.file))
		t.Logf("B:\n%s", ovMust(t, b.ns, "apply", "-f", b.file))
		waitIKE(t, a)
		nsRun(t, a.ns, "ping", "-c", "3", "-i", "0.2", "-W", "3", "192.168.90.2")
	})
	step(t, "transport+VXLAN, PSK: the wire carries ESP only; verify passes on both", func(t *testing.T) {
		wireOnlyESP(t, sw, func() { nsRun(t, a.ns, "ping", "-c", "6", "-i", "0.2", "-W", "3", "192.168.90.2") })
		for _, h := range []ovHost{a, b} {
			out := ovMust(t, h.ns, "verify", "-f", h.file, "--traffic", "--send-to", "192.168.90."+map[string]string{"ike-a": "2", "ike-b": "1"}[h.name], "--window", "2s")
			mustContain(t, out, "CHILD_SA installed", "offload none as asked", "verify: passed")
		}
		mustContain(t, ovMust(t, a.ns, "apply", "-f", a.file), "nothing to do")
	})
	step(t, "rekey bench: CHILD_SA rekeys, alone and colliding, lose nothing; the SAs change", func(t *testing.T) {
		n, out := rekeyCount(), os.Getenv("SLUICE_REKEY_OUT")
		// The report as JSON on stdout (the charts only for the run by
		// hand: rendering them costs seconds under TCG).
		runBench := func(mode, label string, rekeys int, extra ...string) *bench.RekeyReport {
			args := []string{"bench", "rekey", "--ns-a", a.ns, "--ns-b", b.ns, "--to", "192.168.90.2", "--vici-a", ch[0].URI, "--vici-b", ch[1].URI,
				"--rekeys", strconv.Itoa(rekeys), "--interval", "2s", "--rate", "200", "--mode", mode, "--label", label, "--json"}
			if out != "" {
				args = append(args, "--out", filepath.Join(out, label))
			}
			var stderr strings.Builder
			cmd := exec.Command(sluiceBin(t), append(args, extra...)...)
			cmd.Stderr = &stderr
			stdout, _ := cmd.Output()
			var r bench.RekeyReport
			if err := json.Unmarshal(stdout, &r); err != nil || len(r.Events) == 0 {
				t.Fatalf("%s: no report (%v):\n%s%s", label, err, stdout, stderr.String())
			}
			var table strings.Builder
			r.WriteTable(&table)
			t.Logf("%s:\n%s%s", label, table.String(), stderr.String())
			return &r
		}
		spis := run(t, "ip", "-n", a.ns, "xfrm", "state")
		checkRekeyLosses(t, "CHILD_SA rekeys", runBench("child", "sluice-child", n))
		if after := run(t, "ip", "-n", a.ns, "xfrm", "state"); after == spis {
			t.Fatalf("the SAs did not change across %d rekeys:\n%s", n, after)
		}
		run(t, "modprobe", "sch_netem")
		checkRekeyLosses(t, "colliding rekeys", runBench("collide", "sluice-collide", n, "--ike-delay", "100ms", "--ike-dev", "bond0"))
		if os.Getenv("SLUICE_REKEYS") != "" {
			// Reauthentication, measured by hand (docs/benchmarks.md). The
			// charons started with make_before_break = yes.
			reauths := max(2, n/10)
			checkRekeyLosses(t, "reauthentications with make_before_break", runBench("reauth", "reauth-make-before-break", reauths))
			// The naive configuration: charon's default deletes the old
			// CHILD_SAs first. Each IKE_SA reads make_before_break when it
			// is created, so after the reload one more reauthentication is
			// still make-before-break; the IKE_SA it creates has the default.
			for _, c := range ch {
				f, err := os.OpenFile(filepath.Join(c.Opts.Dir, "strongswan.conf"), os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintln(f, "charon {\n  make_before_break = no\n}")
				f.Close()
				run(t, "swanctl", "--reload-settings", "--uri", c.URI)
			}
			checkRekeyLosses(t, "the first reauthentication after the reload (still make-before-break)", runBench("reauth", "first-reauth-after-reload", 1))
			runBench("reauth", "naive-reauth", reauths)
		}
		mustContain(t, ovMust(t, a.ns, "verify", "-f", a.file), "verify: passed")
	})
	step(t, "transport+VXLAN, PSK: teardown unloads and leaves the namespaces as they were", func(t *testing.T) {
		for _, h := range []ovHost{a, b} {
			start := time.Now()
			out := ovMust(t, h.ns, "teardown", "-f", h.file)
			t.Logf("%s teardown (%.1f s):\n%s", h.name, time.Since(start).Seconds(), out)
		}
		if c := run(t, "swanctl", "--list-conns", "--uri", ch[0].URI); strings.Contains(c, "sluice-") {
			t.Fatalf("a connection is left:\n%s", c)
		}
		if got := ikeNSState(t, a.ns); got != beforeA {
			t.Fatalf("A after teardown:\n%s\nbefore:\n%s", got, beforeA)
		}
		if got := ikeNSState(t, b.ns); got != beforeB {
			t.Fatalf("B after teardown:\n%s\nbefore:\n%s", got, beforeB)
		}
	})

	// Phase 2: A's tunnel endpoint 192.168.70.11 lives on a netdevsim
	// port (strongSwan offloads to the interface holding the SA's local
	// address); its packets still leave through the bond (the route), so
	// the kernel encrypts them in software while the SAs sit in netdevsim.
	ensureNetdevsim(t)
	var id int
	var nsim string
	step(t, "tunnel+Geneve, certificates: a CA and two certificates made with pki", func(t *testing.T) {
		pki(t, dir, "--gen --type ecdsa --size 256 --outform pem > ca.key")
		pki(t, dir, "--self --ca --lifetime 30 --in ca.key --dn 'CN=sluice test CA' --outform pem > ca.pem")
		for name, ip := range map[string]string{"ike-a": "192.168.70.11", "ike-b": "192.168.70.2"} {
			pki(t, dir, "--gen --type ecdsa --size 256 --outform pem > "+name+".key")
			pki(t, dir, "--pub --in "+name+".key | pki --issue --cacert ca.pem --cakey ca.key --lifetime 30 --dn 'CN="+name+"' --san "+ip+" --outform pem > "+name+".pem")
			if err := os.Chmod(filepath.Join(dir, name+".key"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		var ports []string
		id, ports = nsimPorts(t, l, a.ns, 1)
		nsim = ports[0]
		run(t, "ip", "-n", a.ns, "link", "set", nsim, "up")
		run(t, "ip", "-n", a.ns, "addr", "add", "192.168.70.11/32", "dev", nsim)
		ovWrite(t, a.file, ikeGeneveHost("ike-a", ch[0].URI, 1, 2, "192.168.70.11", "192.168.70.2", "      offload: crypto\n      offload-dev: "+nsim+"\n"), 0o644)
		ovWrite(t, b.file, ikeGeneveHost("ike-b", ch[1].URI, 2, 1, "192.168.70.2", "192.168.70.11", ""), 0o644)
	})
	beforeA = ikeNSState(t, a.ns)
	step(t, "tunnel+Geneve, certificates: apply both, crypto offload on netdevsim", func(t *testing.T) {
		t.Logf("A:\n%s", ovMust(t, a.ns, "apply", "-f", a.file))
		t.Logf("B:\n%s", ovMust(t, b.ns, "apply", "-f", b.file))
		waitIKE(t, a)
		nsRun(t, a.ns, "ping", "-c", "3", "-i", "0.2", "-W", "3", "192.168.91.2")
		mustContain(t, run(t, "ip", "-n", a.ns, "xfrm", "state"), "mode tunnel", "crypto offload parameters: dev "+nsim)
		mustContain(t, nsimIPsec(t, id, 0), "SA count=2")
	})
	step(t, "tunnel+Geneve, certificates: the wire carries ESP only; verify passes", func(t *testing.T) {
		wireOnlyESP(t, sw, func() { nsRun(t, a.ns, "ping", "-c", "6", "-i", "0.2", "-W", "3", "192.168.91.2") })
		mustContain(t, ovMust(t, a.ns, "verify", "-f", a.file, "--traffic", "--send-to", "192.168.91.2", "--window", "2s"), "offload crypto on "+nsim+" as asked", "verify: passed")
		mustContain(t, ovMust(t, b.ns, "verify", "-f", b.file), "verify: passed")
	})
	step(t, "tunnel+Geneve, certificates: teardown leaves the namespaces as they were", func(t *testing.T) {
		ovMust(t, a.ns, "teardown", "-f", a.file)
		ovMust(t, b.ns, "teardown", "-f", b.file)
		mustContain(t, nsimIPsec(t, id, 0), "SA count=0")
		if got := ikeNSState(t, a.ns); got != beforeA {
			t.Fatalf("A after teardown:\n%s\nbefore:\n%s", got, beforeA)
		}
		if got := ikeNSState(t, b.ns); got != beforeB {
			t.Fatalf("B after teardown:\n%s\nbefore:\n%s", got, beforeB)
		}
	})
	step(t, "manual keying: the same key is not installed again after teardown unless forced", func(t *testing.T) {
		f := filepath.Join(dir, "manual.yaml")
		ovWrite(t, f, "name: manual\nipsec:\n  keys: manual.keys\n  peers:\n    - {name: m, local: 10.99.0.1, remote: 10.99.0.2, spi-out: 0x3001, spi-in: 0x3002}\n", 0o644)
		ovWrite(t, filepath.Join(dir, "manual.keys"), "m out "+ovKeyAB+"\nm in "+ovKeyBA+"\n", 0o600)
		out := ovMust(t, a.ns, "apply", "-f", f)
		mustContain(t, out, "keyed manually: its keys never rotate")
		ovMust(t, a.ns, "teardown", "-f", f)
		out, err := ovSluice(t, a.ns, "apply", "-f", f)
		if err == nil || !strings.Contains(out, "the out key of peer m was installed before") || !strings.Contains(out, "--force") {
			t.Fatalf("apply of a used key after teardown: %v\n%s", err, out)
		}
		if s := run(t, "ip", "-n", a.ns, "xfrm", "state"); strings.Contains(s, "0x00003001") {
			t.Fatalf("the refused SA was installed:\n%s", s)
		}
		ovMust(t, a.ns, "apply", "--force", "-f", f)
		ovMust(t, a.ns, "teardown", "-f", f)
	})
}

// ikeNSState is nsState without the kernel's acquire states (spi 0): once
// one side is torn down, the other's trap policy turns its VTEP's packets
// into acquires, whose larval states the kernel drops by itself after
// net.core.xfrm_acq_expires (30 s). They are not sluice's objects.
func ikeNSState(t *testing.T, ns string) string {
	t.Helper()
	var out []string
	drop := false
	for _, l := range strings.Split(nsState(t, ns), "\n") {
		if strings.HasPrefix(l, "src ") {
			drop = false
		}
		if strings.HasPrefix(l, "\tproto esp spi 0x00000000 ") {
			drop = true
			if n := len(out); n > 0 && strings.HasPrefix(out[n-1], "src ") {
				out = out[:n-1]
			}
		}
		if !drop {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// waitIKE waits until h's verify passes: B's apply initiates IKE, which
// under a loaded TCG guest can take longer than apply waits for it.
func waitIKE(t *testing.T, h ovHost) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := ovSluice(t, h.ns, "verify", "-f", h.file)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("IKE not up after 60 s:\n%s", out)
		}
		time.Sleep(2 * time.Second)
	}
}

// checkRekeyLosses fails for every datagram the rekey bench's report r
// says was lost, except those the kernel counted as XfrmOutStateInvalid on A
// in the same window or the next (a drop lands in the next window's
// counters when it happens just after the boundary). That is the race
// docs/overlay.md describes: a datagram whose route resolved to the old
// outbound SA just before charon installed the new one reached ESP output
// after charon deleted the old one (strongSwan deletes it right after
// installing the new one, with no setting to delay that). Any other loss,
// a run of datagrams at the switch included, fails the test.
func checkRekeyLosses(t *testing.T, what string, r *bench.RekeyReport) {
	t.Helper()
	const race = "A xfrm XfrmOutStateInvalid"
	for i, e := range r.Events {
		if e.Lost == 0 {
			continue
		}
		counted, other := e.Drops[race], false
		if i+1 < len(r.Events) {
			counted += r.Events[i+1].Drops[race]
		}
		for k := range e.Drops {
			other = other || (strings.Contains(k, " xfrm ") && k != race)
		}
		if !other && uint64(e.Lost) <= counted {
			t.Logf("%s: rekey %d lost %d datagram(s) to the outbound SA switch race (XfrmOutStateInvalid on A, docs/overlay.md)", what, e.N, e.Lost)
			continue
		}
		t.Errorf("%s: rekey %d lost %d datagram(s) (longest run %.0f ms): %s; counters: %v", what, e.N, e.Lost, e.LongestGapMS, e.Cause, e.Drops)
	}
}

// rekeyCount is the bench's rekeys per mode: 3 in the suite,
// SLUICE_REKEYS for the documented 100-rekey run.
func rekeyCount() int {
	if n, err := strconv.Atoi(os.Getenv("SLUICE_REKEYS")); err == nil && n > 0 {
		return n
	}
	return 3
}
