// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package agent_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil"
)

// TestFleetMeshESP is TestFleetMesh in the test VM, whose kernel has ESP:
// the same fleet (real kube-apiserver and etcd started in the VM, a charon
// and an agent per netns host), with traffic over the overlay between
// every pair of members, pings kept going while the API server is down
// and while an agent is stopped and restarted (no loss), and the underlay
// captured throughout: ESP and IKE only, never VXLAN or the pings in
// clear.
//
// It costs ~10 minutes under TCG (the API server alone takes 3-4 to be
// ready there, and again after its restart), too much for every CI run:
// it runs when asked: SLUICE_FLEET_MESH_ESP=1 bash scripts/vmtest.sh TestFleetMeshESP.
func TestFleetMeshESP(t *testing.T) {
	testutil.RequireVM(t)
	if os.Getenv("SLUICE_FLEET_MESH_ESP") == "" {
		t.Skip("~10 min under TCG, too long for every CI run: SLUICE_FLEET_MESH_ESP=1 bash scripts/vmtest.sh TestFleetMeshESP")
	}
	needFleet(t)
	// Under qemu TCG the API server takes minutes to be ready (its first
	// start here: 3 min 10 s and not yet ready).
	t.Setenv("SLUICE_KUBE_READY_TIMEOUT", "10m")
	// Settle: a label update takes ~0.5 s under TCG, so the churn's
	// flaps are up to seconds apart.
	fleetMesh(t, true, 5*time.Second)
}

type wire struct {
	sw, file string
	cmd      *exec.Cmd
}

func startWire(t *testing.T, sw string) meshTraffic {
	w := &wire{sw: sw, file: filepath.Join(t.TempDir(), "underlay.pcap")}
	w.cmd = exec.Command("ip", "netns", "exec", sw, "tcpdump", "-i", "br0", "-U", "-n", "-w", w.file, "not arp and not ip6")
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if w.cmd.ProcessState == nil {
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Wait()
		}
	})
	time.Sleep(time.Second)
	return w
}

func overlayAddr(fh *fhost) string { return fmt.Sprintf("10.200.0.%d", fh.idx) }

func (w *wire) pingAll(t *testing.T, members []*fhost) {
	t.Helper()
	for _, m := range members {
		sh(t, "ip", "-n", m.ns, "addr", "replace", overlayAddr(m)+"/24", "dev", "sl-t1")
	}
	for _, a := range members {
		for _, b := range members {
			if a == b {
				continue
			}
			// The first packets wait for IKE (trap policy): retry.
			eventually(t, fmt.Sprintf("ping %s -> %s over the overlay", a.name, b.name), 90*time.Second, func() error {
				out, err := exec.Command("ip", "netns", "exec", a.ns, "ping", "-c", "2", "-W", "3", overlayAddr(b)).CombinedOutput()
				if err != nil {
					return fmt.Errorf("%v: %s", err, out)
				}
				return nil
			})
		}
	}
	// Every member holds an ESP SA pair per peer.
	for _, m := range members {
		out := sh(t, "ip", "-n", m.ns, "xfrm", "state")
		if n := strings.Count(out, "proto esp"); n < 2*(len(members)-1) {
			t.Errorf("%s holds %d ESP SAs, want %d:\n%s", m.name, n, 2*(len(members)-1), out)
		}
	}
}

var pingStats = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

func (w *wire) during(t *testing.T, a, b *fhost, f func()) {
	t.Helper()
	sh(t, "ip", "-n", a.ns, "addr", "replace", overlayAddr(a)+"/24", "dev", "sl-t1")
	sh(t, "ip", "-n", b.ns, "addr", "replace", overlayAddr(b)+"/24", "dev", "sl-t1")
	eventually(t, "overlay up before the traffic", 90*time.Second, func() error {
		return exec.Command("ip", "netns", "exec", a.ns, "ping", "-c", "1", "-W", "3", overlayAddr(b)).Run()
	})
	var out strings.Builder
	cmd := exec.Command("ip", "netns", "exec", a.ns, "ping", "-i", "0.2", "-W", "2", overlayAddr(b))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f()
	time.Sleep(time.Second)
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	m := pingStats.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("ping output:\n%s", out.String())
	}
	sent, got := atoi(m[1]), atoi(m[2])
	t.Logf("traffic %s -> %s meanwhile: %d sent, %d received", a.name, b.name, sent, got)
	if sent < 10 || got != sent {
		t.Errorf("traffic %s -> %s lost packets: %d sent, %d received", a.name, b.name, sent, got)
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func (w *wire) wire(t *testing.T) {
	_ = w.cmd.Process.Signal(syscall.SIGINT)
	_ = w.cmd.Wait()
	count := func(filter string) int {
		out, err := exec.Command("tcpdump", "-n", "-r", w.file, filter).Output()
		if err != nil {
			t.Fatalf("tcpdump -r %s: %v", filter, err)
		}
		return strings.Count(string(out), "\n")
	}
	esp, clear := count("esp"), count("udp port 4789 or udp port 6081 or icmp")
	// IGMP: the kernel reports its multicast memberships when a host's
	// eth0 comes up (hv-e joins during the capture); it is not overlay
	// traffic.
	otherFilter := "not esp and not udp port 500 and not udp port 4500 and not igmp"
	other := count(otherFilter)
	if out, err := exec.Command("tcpdump", "-n", "-r", w.file, "not esp and not udp port 500 and not udp port 4500").Output(); err == nil && len(out) > 0 {
		t.Logf("underlay packets other than ESP and IKE:\n%s", out)
	}
	t.Logf("underlay: %d ESP packets, %d VXLAN/Geneve/ICMP in clear, %d other", esp, clear, other)
	if esp == 0 || clear != 0 || other != 0 {
		st, _ := os.Stat(w.file)
		t.Errorf("the underlay carried more than ESP and IKE (capture %s, %v bytes)", w.file, st.Size())
	}
}
