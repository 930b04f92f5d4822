// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

// sluice lab up overlay-pair on the test VM's kernel (the host lacks ESP):
// two hosts, a VXLAN per tunnel over ESP, applied by 'sluice apply' of the
// files the lab writes; traffic crosses it encrypted, bench ping and iperf3
// measure across it, and lab down leaves nothing behind.

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestLabOverlayPair(t *testing.T) {
	requireVM(t)
	bin := sluiceBin(t)
	const name = "ov"
	h0, h1 := "sl-"+name+"-h0", "sl-"+name+"-h1"
	t.Cleanup(func() { exec.Command(bin, "lab", "down", name).Run() })

	step(t, "lab up: three tunnels applied and verified", func(t *testing.T) {
		out := run(t, bin, "lab", "up", "overlay-pair", "--name", name, "--tunnels", "3")
		mustContain(t, out, "3 VXLAN tunnel(s) over ESP transport")
		mustContain(t, out, "applied and verified")
		for _, ns := range []string{h0, h1} {
			if n := strings.Count(run(t, "ip", "-n", ns, "xfrm", "state"), "proto esp"); n != 6 {
				t.Errorf("%s has %d ESP SAs, want 6 (3 tunnels, in and out)", ns, n)
			}
		}
		if d := run(t, "ip", "-n", h1, "-d", "link", "show", "vx3"); !strings.Contains(d, "vxlan id 3 ") || !strings.Contains(d, "local 123.0.0.4 ") {
			t.Errorf("h1's vx3 is not VNI 3 from 123.0.0.4 (the seeds' TunnelPeer(3)):\n%s", d)
		}
	})

	step(t, "lab up again changes nothing, keys included", func(t *testing.T) {
		before := run(t, "ip", "-n", h0, "xfrm", "state")
		out := run(t, bin, "lab", "up", "overlay-pair", "--name", name, "--tunnels", "3")
		mustContain(t, out, "exists: checking it")
		if after := run(t, "ip", "-n", h0, "xfrm", "state"); after != before {
			t.Errorf("SAs changed on the second lab up:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		out, err := try(bin, "lab", "up", "overlay-pair", "--name", name, "--tunnels", "3", "--forwarder", "sluice")
		if err == nil || !strings.Contains(out, "no forwarder to replace") {
			t.Errorf("--forwarder sluice on overlay-pair must be refused: %v\n%s", err, out)
		}
	})

	step(t, "status", func(t *testing.T) {
		var st []struct {
			Name, Topology string
			Tunnels        int
			Healthy        bool
		}
		if err := json.Unmarshal([]byte(run(t, bin, "lab", "status", name, "--json")), &st); err != nil {
			t.Fatal(err)
		}
		if len(st) != 1 || st[0].Topology != "overlay-pair" || st[0].Tunnels != 3 || !st[0].Healthy {
			t.Errorf("status: %+v", st)
		}
	})

	step(t, "the wire carries only ESP", func(t *testing.T) {
		// Captured on h0 and only what h0 sends: what h0 receives from
		// h1's VTEP is re-injected there decrypted, after the ESP.
		wire := captureWire(t, h0, "p0", "ip and not src host 123.0.0.4", 3, func() {
			nsRun(t, h0, "ping", "-c", "3", "-i", "0.2", "-W", "5", "48.0.2.2")
		})
		lines := strings.Split(strings.TrimSpace(wire), "\n")
		esp := 0
		for _, l := range lines {
			if strings.Contains(l, "ESP(spi=0x00010003") {
				esp++
			} else if strings.Contains(l, " > ") {
				t.Errorf("cleartext on the wire: %s", l)
			}
		}
		if esp < 3 {
			t.Errorf("%d ESP packets of tunnel 3 (SPI 0x10003) on the wire, want >= 3:\n%s", esp, wire)
		}
	})

	step(t, "bench ping and iperf3 across the overlay", func(t *testing.T) {
		var ping struct {
			Run struct {
				Sent     int `json:"sent"`
				Received int `json:"received"`
			} `json:"run"`
		}
		out := run(t, bin, "bench", "ping", "--lab", name, "--count", "200", "--json")
		if err := json.Unmarshal([]byte(out), &ping); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if ping.Run.Sent != 200 || ping.Run.Received != 200 {
			t.Errorf("ping across the overlay: %+v\n%s", ping, out)
		}
		before, _, _ := saStats(t, h0, "123.0.0.1", "123.0.0.2", "0x10001")
		var iperf struct {
			MeanBPS float64 `json:"mean_bps"`
			N       int     `json:"n"`
		}
		out = run(t, bin, "bench", "iperf3", "--lab", name, "--runs", "2", "--time", "1", "--parallel", "1", "--json")
		if err := json.Unmarshal([]byte(out), &iperf); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if iperf.N != 4 || iperf.MeanBPS <= 0 {
			t.Errorf("iperf3 across the overlay: %+v\n%s", iperf, out)
		}
		// Not a speed check (TCG): that the bytes went through tunnel 1's SA.
		if after, _, _ := saStats(t, h0, "123.0.0.1", "123.0.0.2", "0x10001"); after-before < 100 {
			t.Errorf("tunnel 1's outbound SA counted %d packets during iperf3, want >= 100", after-before)
		}
	})

	step(t, "bench run refuses an overlay-pair and says what measures it", func(t *testing.T) {
		out, err := try(bin, "bench", "run", "--lab", name, "--steps", "1", "--step-seconds", "1", "--rate-max", "1kpps")
		if err == nil || !strings.Contains(out, "sluice bench iperf3 --lab "+name) {
			t.Errorf("bench run on overlay-pair: %v\n%s", err, out)
		}
	})

	step(t, "lab down leaves nothing", func(t *testing.T) {
		run(t, bin, "lab", "down", name)
		if list := run(t, "ip", "netns", "list"); strings.Contains(list, "sl-"+name+"-") {
			t.Errorf("namespaces left:\n%s", list)
		}
		if _, err := os.Stat("/run/sluice/lab/" + name); !os.IsNotExist(err) {
			t.Errorf("state (keys, host files, journals) left: %v", err)
		}
	})
}
