// SPDX-License-Identifier: Apache-2.0

package driverquirk

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestForKnownFacts(t *testing.T) {
	for _, tc := range []struct {
		driver, release string
		has, lacks      []Behaviour
	}{
		{MLX5, "6.12.95+deb12-amd64",
			[]Behaviour{ExactSelectorMatch, NoTXMissRule, FragmentsCleartext, Reqid0Cleartext, NoReplayWithoutESN, SeqRestartsAtOne, CleartextAcceptedOnOffloadedIN}, nil},
		{MLX5, "6.15.0", []Behaviour{NoReplayWithoutESN, SeqRestartsAtOne}, []Behaviour{ExactSelectorMatch, CleartextAcceptedOnOffloadedIN}},
		{MLX5, "7.3.4", []Behaviour{CleartextAcceptedOnOffloadedIN}, []Behaviour{ExactSelectorMatch}},
		{MLX5, "6.1.0", nil, []Behaviour{ExactSelectorMatch, NoReplayWithoutESN}},
		{MLX5, "6.6.130", []Behaviour{CleartextAcceptedOnOffloadedIN}, nil},
		{MLX5, "6.6.100", nil, []Behaviour{CleartextAcceptedOnOffloadedIN}},
		{"ixgbe", "6.12.95", []Behaviour{CleartextAcceptedOnOffloadedIN}, []Behaviour{ExactSelectorMatch, NoReplayWithoutESN}},
		{Bonding, "6.12.95", []Behaviour{NoBondPacketOffloadPolicy}, []Behaviour{ExactSelectorMatch}},
		{MLX5, "unknown", []Behaviour{ExactSelectorMatch, NoReplayWithoutESN}, nil},
	} {
		s := For(tc.driver, tc.release)
		for _, b := range tc.has {
			if !s.Has(b) {
				t.Errorf("For(%s, %s) lacks %s", tc.driver, tc.release, b)
			}
		}
		for _, b := range tc.lacks {
			if s.Has(b) {
				t.Errorf("For(%s, %s) has %s", tc.driver, tc.release, b)
			}
		}
	}
}

func TestModelProfiles(t *testing.T) {
	old := ForModel("mlx5-6.12", "6.12.95+deb12-amd64")
	if !old.Has(ExactSelectorMatch) || !old.Has(SeqRestartsAtOne) {
		t.Errorf("mlx5-6.12 profile: %v, want the 6.12 rows", old.Entries())
	}
	up := ForModel("mlx5-upstream", "6.12.95+deb12-amd64")
	if up.Has(ExactSelectorMatch) {
		t.Errorf("mlx5-upstream profile has %s; upstream matches subnets", ExactSelectorMatch)
	}
	if !up.Has(CleartextAcceptedOnOffloadedIN) {
		t.Error("the XFRM core's rows follow the running kernel (6.12.95), not the profile")
	}
	if s := ForModel("no-such", "6.12.95"); !s.Has(ExactSelectorMatch) {
		t.Error("an unknown profile must read as the stricter default")
	}
}

func TestForDeviceReadsModelProfile(t *testing.T) {
	root := t.TempDir()
	if s := ForDevice(ModelDriver, "6.12.95", root); s.Has(ExactSelectorMatch) || !s.Has(CleartextAcceptedOnOffloadedIN) {
		t.Errorf("model without profiles: %v, want only the XFRM core's rows", s.Entries())
	}
	p := filepath.Join(root, ModelProfileParam)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	for profile, want := range map[string]bool{"mlx5-6.12\n": true, "mlx5-upstream\n": false} {
		if err := os.WriteFile(p, []byte(profile), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := ForDevice(ModelDriver, "6.12.95", root).Has(ExactSelectorMatch); got != want {
			t.Errorf("profile %q: exact selector match %v, want %v", strings.TrimSpace(profile), got, want)
		}
	}
	if err := os.WriteFile(p, []byte("kernel-xfrm\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s := ForDevice(ModelDriver, "6.12.95", root); s.Has(NoTXMissRule) || s.Has(ExactSelectorMatch) || !s.Has(CleartextAcceptedOnOffloadedIN) {
		t.Errorf("profile kernel-xfrm: %v, want only the XFRM core's rows", s.Entries())
	}
	if err := os.WriteFile(p, []byte("mlx5-6.12\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	miss := filepath.Join(root, ModelTXMissParam)
	for v, want := range map[string]bool{"-1\n": true, "1\n": true, "0\n": false} {
		if err := os.WriteFile(miss, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		s := ForDevice(ModelDriver, "6.12.95", root)
		if s.Has(NoTXMissRule) != want || !s.Has(ExactSelectorMatch) {
			t.Errorf("tx_miss_cleartext=%s: %v, want no-tx-miss-rule %v and the profile's other rows", strings.TrimSpace(v), s.Entries(), want)
		}
	}
	if !ForDevice(MLX5, "6.12.95", root).Has(ExactSelectorMatch) {
		t.Error("a real mlx5_core ignores the model's parameter")
	}
}

func TestTableRowsAreComplete(t *testing.T) {
	seen := map[Behaviour]bool{}
	for _, e := range Table {
		if e.Source == "" || e.Fix == "" || e.From.IsZero() {
			t.Errorf("row %s of %q: every row needs a source, a fix and a first version", e.Behaviour, e.Driver)
		}
		if !e.Until.IsZero() && !e.From.Less(e.Until) {
			t.Errorf("row %s: range %s is empty", e.Behaviour, e.Range())
		}
		if strings.HasPrefix(e.Behaviour.String(), "behaviour(") {
			t.Errorf("behaviour %d has no name", e.Behaviour)
		}
		seen[e.Behaviour] = true
	}
	for _, b := range Behaviours() {
		if !seen[b] {
			t.Errorf("behaviour %s has no row", b)
		}
	}
}

func TestParseRelease(t *testing.T) {
	for in, want := range map[string]Version{
		"6.12.95+deb12-amd64":   V(6, 12, 95),
		"5.14.0-503.el9.x86_64": V(5, 14, 0),
		"7.0-rc3":               V(7, 0, 0),
	} {
		if got, ok := ParseRelease(in); !ok || got != want {
			t.Errorf("ParseRelease(%q) = %v %v, want %v", in, got, ok, want)
		}
	}
	if _, ok := ParseRelease("abc"); ok {
		t.Error(`ParseRelease("abc") succeeded`)
	}
}

// TestForStack: a VLAN's or a bond's rows are those of the ports beneath
// (ethtool of a VLAN names no driver of the table), the union where they
// differ; the NIC model beneath reads its profile.
func TestForStack(t *testing.T) {
	const rel = "6.12.95+deb12-amd64"
	vlan := ForStack([]string{"802.1Q VLAN Support", MLX5}, rel, t.TempDir())
	if !vlan.Has(ExactSelectorMatch) || !vlan.Has(NoTXMissRule) {
		t.Errorf("a VLAN over mlx5_core on %s: %v, want mlx5's rows", rel, vlan.Entries())
	}
	if !strings.Contains(vlan.As, MLX5) || strings.Contains(vlan.As, "802.1Q") || vlan.Driver != "802.1Q VLAN Support over "+MLX5 {
		t.Errorf("a VLAN over mlx5_core reads as %q (driver %q), want the port's driver named", vlan.As, vlan.Driver)
	}
	if For("802.1Q VLAN Support", rel).Has(ExactSelectorMatch) {
		t.Fatal("the VLAN driver itself has mlx5's rows: the test proves nothing")
	}
	bond := ForStack([]string{Bonding, "ixgbe", MLX5}, rel, t.TempDir())
	for _, b := range []Behaviour{NoBondPacketOffloadPolicy, ExactSelectorMatch, CleartextAcceptedOnOffloadedIN} {
		if !bond.Has(b) {
			t.Errorf("a bond over ixgbe and mlx5_core lacks %s: the strictest port decides", b)
		}
	}
	root := t.TempDir()
	p := filepath.Join(root, ModelProfileParam)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	for profile, want := range map[string]bool{"mlx5-6.12\n": true, "mlx5-upstream\n": false} {
		if err := os.WriteFile(p, []byte(profile), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := ForStack([]string{"macvlan", ModelDriver}, rel, root).Has(ExactSelectorMatch); got != want {
			t.Errorf("a macvlan over the model, profile %s: exact match %v, want %v", strings.TrimSpace(profile), got, want)
		}
	}
	if s := ForStack(nil, rel, root); !s.Has(CleartextAcceptedOnOffloadedIN) || s.Has(ExactSelectorMatch) {
		t.Errorf("no driver: %v, want the XFRM core's rows only", s.Entries())
	}
}
