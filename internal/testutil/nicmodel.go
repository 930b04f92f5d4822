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

var (
	nicmodelLoad sync.Mutex
	// nicmodelProfileSet: this process has set the profile of the loaded
	// module once; later loads leave it (UseNicmodelProfile's choice).
	nicmodelProfileSet bool
)

// The driver profiles of the model (kmod/nicmodel/README.md).
const (
	ProfileMlx5_612      = "mlx5-6.12"
	ProfileMlx5Upstream  = "mlx5-upstream"
	ProfileKernelXFRM    = "kernel-xfrm"
	nicmodelProfileParam = "/sys/module/nicmodel/parameters/profile"
)

// NicmodelProfile is the profile the end-to-end tests run the model
// under: $SLUICE_NICMODEL_PROFILE (scripts/vmtest.sh passes it to the
// guest), else mlx5-6.12, the module's own default: mlx5 as Linux 6.12
// ships it, the oldest kernel users run packet offload on, so a test
// passes only where sluice prevents or announces what that driver leaks
// (issue 31). A test that needs another profile says so with
// UseNicmodelProfile and why (docs/testing.md, "Driver profiles").
func NicmodelProfile() string {
	if p := os.Getenv("SLUICE_NICMODEL_PROFILE"); p != "" {
		return p
	}
	return ProfileMlx5_612
}

// LoadNicmodel inserts the module once per VM boot, under NicmodelProfile.
// A module already loaded is set to that profile the first time this
// process asks: a test that switched it (UseNicmodelProfile) and died
// must not leave it to the next test's process.
func LoadNicmodel(t testing.TB) {
	t.Helper()
	nicmodelLoad.Lock()
	defer nicmodelLoad.Unlock()
	prof := NicmodelProfile()
	if _, err := os.Stat("/sys/module/nicmodel"); err == nil {
		if !nicmodelProfileSet {
			setNicmodelProfile(t, prof)
			nicmodelProfileSet = true
		}
		return
	}
	nicmodelProfileSet = true
	ko := os.Getenv("SLUICE_NICMODEL")
	if ko == "" {
		t.Fatal("SLUICE_NICMODEL unset: scripts/vmtest.sh builds the model with `sluice vm nicmodel`")
	}
	Run(t, "insmod", ko, "profile="+prof)
}

func setNicmodelProfile(t testing.TB, prof string) {
	t.Helper()
	if err := os.WriteFile(nicmodelProfileParam, []byte(prof), 0); err != nil {
		t.Fatalf("nicmodel profile %q: %v (known: %s, %s, %s)", prof, err, ProfileMlx5_612, ProfileMlx5Upstream, ProfileKernelXFRM)
	}
}

// UseNicmodelProfile switches the loaded model to a driver profile for
// the rest of the test, and back to NicmodelProfile after it. Behaviours
// read when an SA is added (its first sequence number, its replay window)
// follow the profile of that moment: switch before installing SAs.
func UseNicmodelProfile(t testing.TB, prof string) {
	t.Helper()
	LoadNicmodel(t)
	setNicmodelProfile(t, prof)
	t.Cleanup(func() { setNicmodelProfile(t, NicmodelProfile()) })
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

// WireAgrees checks the model's own count of the cleartext IP frames a
// port received (rx_cleartext_packets, since before) against the oracle's
// capture of the port's tap (NicWireOracle, since m): the counters must
// tell what the wire carried.
func WireAgrees(t testing.TB, o *WireOracle, m Mark, ns, port string, before map[string]uint64) {
	t.Helper()
	// The traffic is over: the model counted each frame before the tap
	// got its copy (the same NAPI poll), so read the counter, then drain.
	model := EthStats(t, ns, port)["rx_cleartext_packets"] - before["rx_cleartext_packets"]
	o.Drain(t)
	frames := o.Since(m)
	var ip int
	for _, f := range frames {
		if f.Src.IsValid() && f.Class != ESP {
			ip++
		}
	}
	if model != uint64(ip) {
		t.Errorf("%s's rx_cleartext_packets rose by %d, the capture saw %d cleartext IP frames (%s)",
			port, model, ip, Tally(frames, Flow{}))
	}
}

// StatDelta returns after[k]-before[k] for each k.
func StatDelta(before, after map[string]uint64, keys ...string) map[string]uint64 {
	d := map[string]uint64{}
	for _, k := range keys {
		d[k] = after[k] - before[k]
	}
	return d
}
