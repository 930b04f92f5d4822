// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"net/netip"
	"strings"
	"testing"

	kern "sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// TestCheckDriverQuirks: the check flags each leaking layout on the
// driver and kernel the table names, and is silent where the driver has
// the fix (mlx5 6.15, the NIC model's mlx5-upstream profile).
func TestCheckDriverQuirks(t *testing.T) {
	subnetPolicy := func(f *Facts) {
		f.Policies = append(f.Policies, xfrm.Policy{Dir: xfrm.DirOut,
			Sel:     xfrm.Selector{Src: netip.MustParsePrefix("10.0.0.0/24"), Dst: netip.MustParsePrefix("10.1.0.0/16")},
			Offload: &xfrm.Offload{Ifindex: 2, Flags: xfrm.OffloadPacket}})
	}
	hostPolicy := func(f *Facts) {
		f.Policies = append(f.Policies, xfrm.Policy{Dir: xfrm.DirOut,
			Sel:     xfrm.Selector{Src: netip.MustParsePrefix("10.0.0.1/32"), Dst: netip.MustParsePrefix("10.1.0.9/32")},
			Offload: &xfrm.Offload{Ifindex: 2, Flags: xfrm.OffloadPacket}})
	}
	inboundSA := func(esn bool) func(*Facts) {
		return func(f *Facts) {
			f.States = append(f.States, xfrm.State{Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.0.0.1"), Proto: xfrm.ProtoESP, SPI: 0x300,
				Alg: xfrm.StateAlg{ESN: esn}, Offload: &xfrm.Offload{Ifindex: 3, Flags: xfrm.OffloadPacket | xfrm.OffloadInbound}})
		}
	}
	onPort := func(f *Facts) { // the healthy gateway's SAs on p0, not on the bond
		for i := range f.States {
			f.States[i].Offload.Ifindex = 2
		}
	}
	kernel := func(rel string) func(*Facts) { return func(f *Facts) { f.Kernel.Release = rel } }
	model := func(profile string) func(*Facts) {
		return func(f *Facts) {
			f.ModelProfile = profile
			for i := range f.Netdevs {
				if f.Netdevs[i].Driver == "mlx5_core" {
					f.Netdevs[i].Driver = "nicmodel"
				}
			}
		}
	}
	// A VLAN on p0 (ethtool: "802.1Q VLAN Support"), holding the policy:
	// its frames leave through p0, whose driver's rows are the VLAN's.
	onVLAN := func(f *Facts) {
		f.Netdevs = append(f.Netdevs, kern.NetdevFacts{Name: "p0.100", Index: 40, Kind: "vlan", Driver: "802.1Q VLAN Support", Lower: "p0"})
		f.Policies[len(f.Policies)-1].Offload.Ifindex = 40
	}
	// A veth's Lower is its peer (IFLA_LINK), which carries none of its
	// frames out: not walked.
	onVeth := func(f *Facts) {
		f.Netdevs = append(f.Netdevs, kern.NetdevFacts{Name: "v0", Index: 41, Kind: "veth", Driver: "veth", Lower: "p0"})
		f.Policies[len(f.Policies)-1].Offload.Ifindex = 41
		f.States = nil // the healthy bond's SAs warn on 6.12
	}
	for _, tc := range []struct {
		name    string
		facts   []func(*Facts)
		verdict Verdict
		want    string
	}{
		{"subnet policy on mlx5 6.12", []func(*Facts){kernel("6.12.95+deb12-amd64"), subnetPolicy}, Fail, "only 10.0.0.0 -> 10.1.0.0 is encrypted in hardware"},
		{"subnet policy on a VLAN over mlx5 6.12", []func(*Facts){kernel("6.12.95"), subnetPolicy, onVLAN}, Fail, "p0.100 (802.1Q VLAN Support 6.12.95; mlx5_core 6.12.95), which matches selector addresses exactly"},
		{"subnet policy on a VLAN over the model, mlx5-6.12", []func(*Facts){kernel("6.12.95"), model("mlx5-6.12"), subnetPolicy, onVLAN}, Fail, "nicmodel profile mlx5-6.12"},
		{"subnet policy on a veth whose peer is mlx5", []func(*Facts){kernel("6.12.95"), subnetPolicy, onVeth}, OK, ""},
		{"subnet policy on mlx5 6.15", []func(*Facts){kernel("6.15.1"), subnetPolicy}, OK, ""},
		{"host policy on mlx5 6.12", []func(*Facts){kernel("6.12.95"), hostPolicy}, Warn, "on bond0 (bond bond0)"}, // the healthy SAs sit on bond0
		{"subnet policy on the model, mlx5-6.12", []func(*Facts){kernel("6.16.0"), model("mlx5-6.12"), subnetPolicy}, Fail, "nicmodel profile mlx5-6.12"},
		{"subnet policy on the model, mlx5-upstream", []func(*Facts){kernel("6.16.0"), model("mlx5-upstream"), subnetPolicy}, OK, ""},
		{"subnet policy on a model without profiles", []func(*Facts){kernel("6.16.0"), model(""), subnetPolicy}, OK, ""},
		{"non-ESN inbound packet SA on mlx5", []func(*Facts){inboundSA(false)}, Warn, "without ESN: no anti-replay at all"},
		{"ESN inbound packet SA on mlx5", []func(*Facts){inboundSA(true)}, OK, ""},
		{"packet SAs on a bond port on 6.12", []func(*Facts){kernel("6.12.95"), onPort}, Warn, "on p0 (bond bond0), and Linux 6.12.95 accepts cleartext"},
		{"packet SAs on a bond port on 6.16", []func(*Facts){onPort}, OK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := healthy()
			for _, m := range tc.facts {
				m(f)
			}
			rs := checkDriverQuirks(f, &DoctorOptions{})
			worst, all := OK, ""
			for _, r := range rs {
				worst = max(worst, r.Verdict)
				all += r.Summary + " | fix: " + r.Fix + "\n"
				if r.Verdict >= Warn && r.Fix == "" {
					t.Errorf("a %v without a fix: %s", r.Verdict, r.Summary)
				}
			}
			if worst != tc.verdict || !strings.Contains(all, tc.want) {
				t.Errorf("verdict %v, want %v with %q:\n%s", worst, tc.verdict, tc.want, all)
			}
		})
	}
}
