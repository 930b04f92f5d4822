// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"encoding/json"
	"net/netip"
	"os"
	"strings"
	"testing"

	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

func on() kernel.EthFeature    { return kernel.EthFeature{Available: true, Active: true, Requested: true} }
func off() kernel.EthFeature   { return kernel.EthFeature{Available: true} }
func fixed() kernel.EthFeature { return kernel.EthFeature{} }

// healthy is a gateway that passes every check: the ConnectX-7 benchmark's ConnectX-7
// ports p0/p1 in an active-backup bond with ESP offload, packet-offload
// SAs on the bond (per-CPU: two per peer direction; the bond moves them
// to the new active port at failover, from Linux 6.16), a VXLAN with headroom, native
// XDP, dmfs steering in legacy mode, and the seeds' firmware settings.
func healthy() *Facts {
	espOn := map[string]kernel.EthFeature{"esp-hw-offload": on(), "tx-esp-segmentation": on(), "hw-tc-offload": on()}
	sa := func(src, dst string, spi uint32) xfrm.State {
		return xfrm.State{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: xfrm.ProtoESP, SPI: spi, Mode: xfrm.ModeTunnel,
			Offload: &xfrm.Offload{Ifindex: 10, Flags: xfrm.OffloadPacket}}
	}
	return withGuests(&Facts{
		Kernel: &kernel.Features{Release: "6.16.2", Have: map[string]bool{"xfrm": true, "esp": true, "gcm": true, "bonding": true, "8021q": true, "xdp": true},
			Evidence: map[string]string{"xfrm": "XFRM netlink answers", "esp": "installed an ESP SA", "gcm": "accepted"}},
		Netdevs: []kernel.NetdevFacts{
			{Name: "bond0", Index: 10, Kind: "bond", MTU: 9000, BondMode: "active-backup", ActiveSlave: "p0", Slaves: []string{"p0", "p1"}, Driver: "bonding"},
			{Name: "p0", Index: 2, Kind: "device", Driver: "mlx5_core", PCI: "0000:31:00.0", MTU: 9000, Master: "bond0", XDPMode: "native", XDPProgID: 7},
			{Name: "p1", Index: 3, Kind: "device", Driver: "mlx5_core", PCI: "0000:31:00.1", MTU: 9000, Master: "bond0"},
			{Name: "vx0", Index: 11, Kind: "vxlan", MTU: 8850, Lower: "bond0"},
		},
		Features: map[string]map[string]kernel.EthFeature{"bond0": espOn, "p0": espOn, "p1": espOn},
		Devlink: []kernel.DevlinkFacts{
			{Bus: "pci", Device: "0000:31:00.0", Driver: "mlx5_core", Eswitch: "legacy", Params: map[string]string{"flow_steering_mode": "dmfs"}},
		},
		States: []xfrm.State{sa("10.0.0.1", "10.0.0.2", 0x100), sa("10.0.0.1", "10.0.0.2", 0x101), sa("10.0.0.2", "10.0.0.1", 0x200), sa("10.0.0.2", "10.0.0.1", 0x201)},
		TC:     map[string][]kernel.TCFilter{"p0": {{Hook: "ingress", Kind: "flower", SkipHW: true}}},
		Probes: map[string]xfrm.OffloadProbe{"bond0": {}, "p0": {}, "p1": {}},
		Firmware: map[string]map[string]string{"0000:31:00.0": {"SRIOV_EN": "True(1)", "NUM_OF_VFS": "8", "LAG_RESOURCE_ALLOCATION": "1",
			"FLEX_PARSER_PROFILE_ENABLE": "3", "HAIRPIN_DATA_BUFFER_LOCK": "True(1)"}},
		FirmwareTool: "/usr/bin/mstconfig",
		StrongSwan:   "6.0.3",
	})
}

// reportJSON is the report as doctor --json writes it: every field the
// text shows, so two diagnoses compare without the CLI's renderer.
func reportJSON(t *testing.T, r *Report) string {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func results(t *testing.T, f *Facts, o DoctorOptions, check string) []Result {
	t.Helper()
	o.Only = []string{check}
	r, err := Diagnose(f, o)
	if err != nil {
		t.Fatal(err)
	}
	return r.Results
}

func TestDoctorHealthyPasses(t *testing.T) {
	r, err := Diagnose(healthy(), DoctorOptions{WantEswitch: "legacy"})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range r.Results {
		if res.Verdict != OK {
			t.Errorf("%s %s: %v %s %v", res.Check, res.Subject, res.Verdict, res.Summary, res.Evidence)
		}
	}
	if len(r.Results) < len(Checks) {
		t.Errorf("%d results for %d checks", len(r.Results), len(Checks))
	}
}

// Each check, made to fail (or warn) by one change to the healthy host.
func TestDoctorEachCheckFails(t *testing.T) {
	for _, tc := range []struct {
		check   string
		name    string
		opts    DoctorOptions
		break_  func(f *Facts)
		verdict Verdict
		subject string
		want    string // in the summary
		fix     string // in the fix
	}{
		{"kernel-features", "no ESP", DoctorOptions{}, func(f *Facts) { f.Kernel.Have["esp"] = false }, Fail, "kernel 6.16.2", "missing esp", "CONFIG_INET_ESP"},
		{"kernel-features", "no GCM", DoctorOptions{}, func(f *Facts) { f.Kernel.Have["gcm"] = false }, Fail, "kernel 6.16.2", "missing gcm", "CONFIG_CRYPTO_GCM"},
		{"esp-offload", "offload off", DoctorOptions{}, func(f *Facts) {
			f.Features["p1"] = map[string]kernel.EthFeature{"esp-hw-offload": off(), "tx-esp-segmentation": off()}
		}, Warn, "p1", "esp-hw-offload is off", "ethtool -K p1 esp-hw-offload on"},
		{"esp-offload", "no ESP GSO", DoctorOptions{}, func(f *Facts) {
			f.Features["p1"] = map[string]kernel.EthFeature{"esp-hw-offload": on(), "tx-esp-segmentation": off()}
		}, Warn, "p1", "tx-esp-segmentation off", "ethtool -K p1 tx-esp-segmentation on"},
		{"bond-offload", "slave cannot offload", DoctorOptions{}, func(f *Facts) {
			f.Features["p1"] = map[string]kernel.EthFeature{"esp-hw-offload": fixed(), "tx-esp-segmentation": fixed()}
		}, Fail, "bond0", "bond claims esp-hw-offload but slave p1 lacks it", "replace slave p1"},
		{"bond-offload", "slave has it off", DoctorOptions{}, func(f *Facts) {
			f.Features["p1"] = map[string]kernel.EthFeature{"esp-hw-offload": off(), "tx-esp-segmentation": on()}
		}, Fail, "bond0", "bond claims esp-hw-offload but slave p1 lacks it", "ethtool -K p1 esp-hw-offload on"},
		{"bond-offload", "bond does not offer what slaves have", DoctorOptions{}, func(f *Facts) {
			f.Features["bond0"] = map[string]kernel.EthFeature{"esp-hw-offload": off(), "tx-esp-segmentation": off()}
		}, Warn, "bond0", "slaves p0, p1 offload ESP but the bond does not offer it", "ethtool -K bond0 esp-hw-offload on"},
		{"bond-offload", "bond mode without offload", DoctorOptions{}, func(f *Facts) {
			f.Netdevs[0].BondMode = "balance-xor"
			f.Features["bond0"] = map[string]kernel.EthFeature{"esp-hw-offload": off(), "tx-esp-segmentation": off()}
		}, Warn, "bond0", "bond mode balance-xor cannot", "mode active-backup"},
		{"offload-probe", "crypto SA refused", DoctorOptions{}, func(f *Facts) {
			f.Probes["bond0"] = xfrm.OffloadProbe{Crypto: "invalid argument (Slave does not support ipsec offload)", Packet: "invalid argument"}
		}, Fail, "bond0", "refused a crypto-offload SA: invalid argument (Slave does not support ipsec offload)", "active slave must offload ESP"},
		{"offload-probe", "packet offload refused", DoctorOptions{}, func(f *Facts) { f.Probes["p1"] = xfrm.OffloadProbe{Packet: "operation not supported"} }, Warn, "p1", "crypto offload only", "flow_steering_mode dmfs"},
		{"mlx5-tc-order", "tc before IPsec", DoctorOptions{}, func(f *Facts) {
			f.TC["p1"] = []kernel.TCFilter{{Hook: "ingress", Kind: "flower", SkipSW: true}}
		}, Warn, "p1", "tc rules are installed before any IPsec packet-offload rule", "install the IPsec packet-offload SAs/policies first"},
		{"mlx5-tc-order", "tc next to packet offload", DoctorOptions{}, func(f *Facts) {
			f.TC["p0"] = []kernel.TCFilter{{Hook: "ingress", Kind: "flower"}}
			for i := range f.States {
				f.States[i].Offload.Ifindex = 2 // on p0 itself
			}
		}, Warn, "p0", "tc rules and IPsec packet offload on one port", "not_in_hw"},
		{"mlx5-steering", "smfs in switchdev", DoctorOptions{}, func(f *Facts) {
			f.Devlink[0].Eswitch, f.Devlink[0].Params["flow_steering_mode"] = "switchdev", "smfs"
		}, Fail, "pci/0000:31:00.0", "offers no IPsec packet offload", "flow_steering_mode value dmfs"},
		{"mlx5-steering", "eswitch mode not what the config needs", DoctorOptions{WantEswitch: "switchdev"}, func(*Facts) {}, Fail, "pci/0000:31:00.0", "eswitch mode legacy, the configuration needs switchdev", "devlink dev eswitch set pci/0000:31:00.0 mode switchdev"},
		{"mtu-headroom", "overlay MTU too large", DoctorOptions{}, func(f *Facts) { f.Netdevs[3].MTU = 9000 }, Warn, "vx0", "becomes 9104 bytes on bond0 (MTU 9000)", "ip link set dev vx0 mtu 8896"},
		{"sa-per-peer", "one SA per peer", DoctorOptions{}, func(f *Facts) { f.States = f.States[1:3]; f.Kernel.Release = "6.12.95+deb12-amd64" }, Warn, "2 of 2 peer direction(s)", "a single SA per peer", "(this host runs 6.12.95+deb12-amd64: upgrade the kernel first)"},
		{"firmware", "flex parser and hairpin", DoctorOptions{}, func(f *Facts) {
			f.Firmware["0000:31:00.0"]["FLEX_PARSER_PROFILE_ENABLE"] = "0"
			f.Firmware["0000:31:00.0"]["HAIRPIN_DATA_BUFFER_LOCK"] = "False(0)"
		}, Warn, "0000:31:00.0", "FLEX_PARSER_PROFILE_ENABLE is 0, not 3", "set HAIRPIN_DATA_BUFFER_LOCK=True"},
		{"firmware", "bond across the card without LAG resources", DoctorOptions{}, func(f *Facts) {
			f.Firmware["0000:31:00.0"]["LAG_RESOURCE_ALLOCATION"] = "0"
		}, Warn, "0000:31:00.0", "bond0 bonds two ports of this card but LAG_RESOURCE_ALLOCATION is 0", "set LAG_RESOURCE_ALLOCATION=1"},
		{"firmware", "SR-IOV without VFs", DoctorOptions{}, func(f *Facts) { f.Firmware["0000:31:00.0"]["NUM_OF_VFS"] = "0" }, Warn, "0000:31:00.0", "NUM_OF_VFS 0", "set NUM_OF_VFS="},
		{"xdp-mode", "generic XDP", DoctorOptions{}, func(f *Facts) { f.Netdevs[1].XDPMode = "generic" }, Warn, "p0", "generic (skb) mode", "xdpdrv"},
		{"kernel-version", "6.1: no packet offload", DoctorOptions{}, func(f *Facts) { f.Kernel.Release = "6.1.0-28-amd64" }, Warn, "kernel 6.1.0-28-amd64", "lacks IPsec packet offload, the ICMP-error FWD lookup, per-CPU SAs", "6.13"},
		{"kernel-version", "6.6: no ICMP-error FWD lookup", DoctorOptions{}, func(f *Facts) { f.Kernel.Release = "6.6.58" }, Warn, "kernel 6.6.58", "lacks the ICMP-error FWD lookup, per-CPU SAs", "6.13"},
		{"kernel-version", "6.12: no per-CPU SAs", DoctorOptions{}, func(f *Facts) { f.Kernel.Release = "6.12.95+deb12-amd64" }, Info, "kernel 6.12.95+deb12-amd64", "lacks per-CPU SAs", "6.12 LTS"},
		{"strongswan", "bookworm's 5.9.8", DoctorOptions{}, func(f *Facts) { f.StrongSwan = "5.9.8" }, Warn, "strongSwan 5.9.8", "refuses hw_offload = packet", "6.x"},
		{"strongswan", "5.9.13", DoctorOptions{}, func(f *Facts) { f.StrongSwan = "5.9.13" }, Info, "strongSwan 5.9.13", "per_cpu_sas) need 6.0.2", "6.x is recommended"},
	} {
		t.Run(tc.check+"/"+tc.name, func(t *testing.T) {
			f := healthy()
			tc.break_(f)
			var got *Result
			rs := results(t, f, tc.opts, tc.check)
			for i := range rs {
				if rs[i].Subject == tc.subject {
					got = &rs[i]
				}
			}
			if got == nil {
				t.Fatalf("no result for %q: %+v", tc.subject, rs)
			}
			if got.Verdict != tc.verdict || !strings.Contains(got.Summary, tc.want) || !strings.Contains(got.Fix, tc.fix) {
				t.Errorf("got %v %q (fix %q), want %v containing %q (fix containing %q)", got.Verdict, got.Summary, got.Fix, tc.verdict, tc.want, tc.fix)
			}
			if len(got.Evidence) == 0 && tc.check != "sa-per-peer" {
				t.Errorf("no evidence")
			}
		})
	}
}

func TestDoctorUnknownCheck(t *testing.T) {
	_, err := Diagnose(healthy(), DoctorOptions{Only: []string{"bond"}})
	if err == nil || !strings.Contains(err.Error(), "bond-offload") {
		t.Fatalf("err = %v, want the list of known checks", err)
	}
}

// Facts survive a JSON round trip (`--save-facts` then `--facts`) with the
// same diagnosis.
func TestDoctorFactsRoundTrip(t *testing.T) {
	f := healthy()
	f.Features["p1"] = map[string]kernel.EthFeature{"esp-hw-offload": fixed()}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var back Facts
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	r1, _ := Diagnose(f, DoctorOptions{})
	r2, _ := Diagnose(&back, DoctorOptions{})
	if t1, t2 := reportJSON(t, r1), reportJSON(t, r2); t1 != t2 {
		t.Errorf("diagnosis changed through JSON:\n%s\n---\n%s", t1, t2)
	}
	if r1.Overall != Fail {
		t.Errorf("overall %v, want fail", r1.Overall)
	}
}

func TestParseFirmwareQuery(t *testing.T) {
	b, err := os.ReadFile("testdata/mstconfig-q.txt")
	if err != nil {
		t.Fatal(err)
	}
	v := ParseFirmwareQuery(string(b))
	for k, want := range map[string]string{"SRIOV_EN": "True(1)", "NUM_OF_VFS": "8", "FLEX_PARSER_PROFILE_ENABLE": "0", "HAIRPIN_DATA_BUFFER_LOCK": "False(0)", "LAG_RESOURCE_ALLOCATION": "DEVICE_DEFAULT(0)"} {
		if v[k] != want {
			t.Errorf("%s = %q, want %q", k, v[k], want)
		}
	}
	if fwNumber(v["SRIOV_EN"]) != "1" || fwNumber(v["NUM_OF_VFS"]) != "8" {
		t.Errorf("fwNumber: %q %q", fwNumber(v["SRIOV_EN"]), fwNumber(v["NUM_OF_VFS"]))
	}
}

func TestKernelAtLeast(t *testing.T) {
	for rel, want := range map[string]bool{"6.13.0": true, "6.12.95+deb12-amd64": false, "7.0.10": true, "6.18.44-fc": true, "5.15.0": false} {
		if kernelAtLeast(rel, 6, 13) != want {
			t.Errorf("%s >= 6.13: want %v", rel, want)
		}
	}
}

// A bond on a kernel where offloaded SAs corrupt its state is not probed;
// doctor says so instead of passing or failing it.
func TestOffloadProbeSkippedOnBrokenBondKernels(t *testing.T) {
	f := &Facts{Probes: map[string]xfrm.OffloadProbe{"bond0": {Skipped: "ESP offload through a bond is broken on Linux 6.12.95"}}}
	rs := checkOffloadProbe(f, nil)
	if len(rs) != 1 || rs[0].Verdict != Warn || !strings.Contains(rs[0].Summary, "not probed") || rs[0].Fix == "" {
		t.Fatalf("got %+v, want one WARN saying the bond was not probed, with a fix", rs)
	}
}
