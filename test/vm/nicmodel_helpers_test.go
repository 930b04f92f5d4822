// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The NIC model (kmod/nicmodel): a pair of ports joined by a wire, with
// IPsec packet offload done in the "device". scripts/vmtest.sh builds it
// (sluice vm nicmodel) and exports its path as SLUICE_NICMODEL, and an
// iproute2 that knows "offload packet" as SLUICE_IP_PACKET.

var nicmodelLoad sync.Mutex

// loadNicmodel inserts the module once per VM boot.
func loadNicmodel(t *testing.T) {
	t.Helper()
	nicmodelLoad.Lock()
	defer nicmodelLoad.Unlock()
	if _, err := os.Stat("/sys/module/nicmodel"); err == nil {
		return
	}
	ko := os.Getenv("SLUICE_NICMODEL")
	if ko == "" {
		t.Fatal("SLUICE_NICMODEL unset: scripts/vmtest.sh builds the model with `sluice vm nicmodel`")
	}
	run(t, "insmod", ko)
}

// ipPacket is the path of an ip(8) that knows "offload packet".
func ipPacket(t *testing.T) string {
	t.Helper()
	p := os.Getenv("SLUICE_IP_PACKET")
	if p == "" {
		t.Fatal("SLUICE_IP_PACKET unset: make setup unpacks iproute2 6.15 from bookworm-backports, scripts/vmtest.sh exports it")
	}
	return p
}

// nicPair creates a pair of model ports, devA in nsA and devB in nsB,
// both up, and returns their names ("nmA", "nmB").
func (l *lab) nicPair(t *testing.T, nsA, nsB string) (string, string) {
	t.Helper()
	return l.nicPairNamed(t, nsA, "nmA", nsB, "nmB")
}

// nicPairNamed is nicPair with the ports' names.
func (l *lab) nicPairNamed(t *testing.T, nsA, a, nsB, b string) (string, string) {
	t.Helper()
	loadNicmodel(t)
	nsRun(t, nsA, "sh", "-c", "echo '"+a+" "+b+"' > /sys/module/nicmodel/parameters/new_pair")
	run(t, "ip", "-n", nsA, "link", "set", b, "netns", nsB)
	run(t, "ip", "-n", nsA, "link", "set", a, "up")
	run(t, "ip", "-n", nsB, "link", "set", b, "up")
	return a, b
}

// macOf reads a device's MAC address inside a namespace.
func macOf(t *testing.T, ns, dev string) string {
	t.Helper()
	return strings.TrimSpace(nsRun(t, ns, "cat", "/sys/class/net/"+dev+"/address"))
}

// ethStats parses `ethtool -S` of a device into name -> value.
func ethStats(t *testing.T, ns, dev string) map[string]uint64 {
	t.Helper()
	out := nsRun(t, ns, "ethtool", "-S", dev)
	m := map[string]uint64{}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			m[k] = n
		}
	}
	if _, ok := m["tx_ipsec_packets"]; !ok {
		t.Fatalf("ethtool -S %s: no tx_ipsec_packets counter:\n%s", dev, out)
	}
	return m
}

// statDelta returns after[k]-before[k] for each k.
func statDelta(before, after map[string]uint64, keys ...string) map[string]uint64 {
	d := map[string]uint64{}
	for _, k := range keys {
		d[k] = after[k] - before[k]
	}
	return d
}

// xfrmMonitor starts `ip xfrm monitor` in a namespace; the returned
// function stops it and returns what it printed.
func xfrmMonitor(t *testing.T, ns string, what ...string) func() string {
	t.Helper()
	var out strings.Builder
	cmd := exec.Command("ip", append([]string{"-n", ns, "xfrm", "monitor"}, what...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("ip xfrm monitor: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // subscribed before the test acts
	stopped := false
	stop := func() string {
		if !stopped {
			stopped = true
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return out.String()
	}
	t.Cleanup(func() { stop() })
	return stop
}
