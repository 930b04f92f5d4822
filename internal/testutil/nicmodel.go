// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The NIC model (kmod/nicmodel): pairs of ports joined by a wire, with
// IPsec packet offload done in the "device". scripts/vmtest.sh builds it
// (sluice vm nicmodel) and exports its path as SLUICE_NICMODEL, and an
// iproute2 that knows "offload packet" as SLUICE_IP_PACKET.

var nicmodelLoad sync.Mutex

// LoadNicmodel inserts the module once per VM boot.
func LoadNicmodel(t testing.TB) {
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
	Run(t, "insmod", ko)
}

// IPPacket is the path of an ip(8) that knows "offload packet".
func IPPacket(t testing.TB) string {
	t.Helper()
	p := os.Getenv("SLUICE_IP_PACKET")
	if p == "" {
		t.Fatal("SLUICE_IP_PACKET unset: make setup unpacks iproute2 6.15 from bookworm-backports, scripts/vmtest.sh exports it")
	}
	return p
}

// NicPair creates a pair of model ports, a in nsA and b in nsB (both
// created in nsA, so b must be a free name there too), both up.
func NicPair(t testing.TB, nsA, a, nsB, b string) {
	t.Helper()
	LoadNicmodel(t)
	NSRun(t, nsA, "sh", "-c", "echo '"+a+" "+b+"' > /sys/module/nicmodel/parameters/new_pair")
	Run(t, "ip", "-n", nsA, "link", "set", b, "netns", nsB)
	Run(t, "ip", "-n", nsA, "link", "set", a, "up")
	Run(t, "ip", "-n", nsB, "link", "set", b, "up")
}

// MacOf reads a device's MAC address inside a namespace.
func MacOf(t testing.TB, ns, dev string) string {
	t.Helper()
	return strings.TrimSpace(NSRun(t, ns, "cat", "/sys/class/net/"+dev+"/address"))
}

// EthStats parses `ethtool -S` of a model port into name -> value.
func EthStats(t testing.TB, ns, dev string) map[string]uint64 {
	t.Helper()
	out := NSRun(t, ns, "ethtool", "-S", dev)
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

// StatDelta returns after[k]-before[k] for each k.
func StatDelta(before, after map[string]uint64, keys ...string) map[string]uint64 {
	d := map[string]uint64{}
	for _, k := range keys {
		d[k] = after[k] - before[k]
	}
	return d
}
