// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"os"
	"strings"
	"testing"

	"sluice/internal/testutil"
)

// TestProbesAgreeWithKernelConfig checks each probe against the kernel's own
// build config: a feature built in (=y) or as a module (=m, loadable here
// because modprobe works wherever modules exist) must probe as present, and
// one not configured must probe as absent.
func TestProbesAgreeWithKernelConfig(t *testing.T) {
	testutil.RequireRoot(t, "feature probes (CAP_NET_ADMIN, CAP_BPF)")
	f := ProbeFeatures()
	if len(f.Unknown) > 0 {
		t.Fatalf("probes returned unknown as root: %v (%v)", f.Unknown, f.Evidence)
	}
	cfg := testutil.KernelConfig(t, f.Release)
	symbols := map[string]string{
		FeatureESP:     "INET_ESP",
		FeatureGCM:     "CRYPTO_GCM",
		FeatureBonding: "BONDING",
		FeatureVLAN:    "VLAN_8021Q",
		FeatureVXLAN:   "VXLAN",
		FeatureGeneve:  "GENEVE",
		FeatureFlower:  "NET_CLS_FLOWER",
		FeatureBTF:     "DEBUG_INFO_BTF",
		FeatureXFRM:    "XFRM_USER",
	}
	for feature, sym := range symbols {
		v := cfg[sym]
		want := v == "y" || v == "m"
		if got := f.Have[feature]; got != want {
			t.Errorf("%s: probe says %v, CONFIG_%s=%q (evidence: %s)", feature, got, sym, v, f.Evidence[feature])
		}
	}
	if !f.Have[FeatureXDP] && cfg["BPF_SYSCALL"] == "y" {
		t.Errorf("xdp: probe says no on a kernel with CONFIG_BPF_SYSCALL=y: %s", f.Evidence[FeatureXDP])
	}
}

// TestProbesLeaveNoNamespaceBehind guards the promise that probing never
// touches the host: the links a probe creates live in a namespace that dies.
func TestProbesLeaveNoNamespaceBehind(t *testing.T) {
	testutil.RequireRoot(t, "feature probes")
	before, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		t.Fatal(err)
	}
	ProbeFeatures()
	after, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(before), "\n") != strings.Count(string(after), "\n") {
		t.Fatalf("probe changed the host's interfaces:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if strings.Contains(string(after), "probe-") {
		t.Fatalf("a probe link leaked into the host namespace:\n%s", after)
	}
}
