// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/config"
	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// Planning against hand-built live state: what the plan contains, in
// which order, what it refuses, and that a host that matches gives no step.

const (
	testKeyOut = "00112233445566778899aabbccddeeff01020304"
	testKeyIn  = "ffeeddccbbaa99887766554433221100a0b0c0d0"
)

// seedHost is the ConnectX-6 SR-IOV guide's node A with a VXLAN over ESP transport.
func seedHost(offload, dev string) string {
	s := `name: node-a
uplinks:
  ports: [p0, p1]
  mtu: 9216
  bond: {name: bond0, primary: p0}
  addresses: [192.168.70.2/24]
vteps:
  - name: vxlan1
    vni: 1024
    local: 192.168.80.2
    remotes: [{address: 192.168.80.3, via: 192.168.70.3}]
    mtu: 3986
ipsec:
  keys: node-a.keys
  peers:
    - name: node-b
      local: 192.168.80.2
      remote: 192.168.80.3
      spi-out: 0x1001
      spi-in: 0x1002
      esn: true
      replay-window: 64
      offload: ` + offload + "\n"
	if dev != "" {
		s += "      offload-dev: " + dev + "\n"
	}
	return s
}

// load parses a host file written in a temp dir with its key file.
func load(t *testing.T, body string) (*config.Host, *config.Keys) {
	t.Helper()
	dir := t.TempDir()
	f := filepath.Join(dir, "host.yaml")
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "node-a.keys"), []byte("node-b out "+testKeyOut+"\nnode-b in "+testKeyIn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := config.LoadHost(f)
	if err != nil {
		t.Fatal(err)
	}
	var ks *config.Keys
	if h.IPsec != nil {
		if ks, err = config.LoadKeys(h.KeysPath()); err != nil {
			t.Fatal(err)
		}
	}
	return h, ks
}

// bareLive is a host with two idle ports and lo.
func bareLive(release string) *Live {
	return &Live{Release: release, Links: []kernel.LinkConfig{
		{Name: "lo", Index: 1, MTU: 65536, Up: true, Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}},
		{Name: "p0", Index: 2, MTU: 1500},
		{Name: "p1", Index: 3, MTU: 1500},
	}}
}

// matchingLive is the host after a successful apply of seedHost(none).
func matchingLive(t *testing.T) *Live {
	t.Helper()
	l := bareLive("6.12.95")
	l.Links[1].Master, l.Links[1].Up, l.Links[1].MTU = 4, true, 9216
	l.Links[2].Master, l.Links[2].Up, l.Links[2].MTU = 4, true, 9216
	l.Links[0].Addrs = append(l.Links[0].Addrs, netip.MustParsePrefix("192.168.80.2/32"))
	l.Links = append(l.Links,
		kernel.LinkConfig{Name: "bond0", Index: 4, Kind: "bond", MTU: 9216, Up: true, Addrs: []netip.Prefix{netip.MustParsePrefix("192.168.70.2/24")},
			Bond: &kernel.BondConfig{Mode: "active-backup", MIIMon: 100, Primary: 2, Active: 2}},
		kernel.LinkConfig{Name: "vxlan1", Index: 5, Kind: "vxlan", MTU: 3986, Up: true,
			VXLAN: &kernel.VXLANConfig{VNI: 1024, Local: netip.MustParseAddr("192.168.80.2"), Remote: netip.MustParseAddr("192.168.80.3"), Port: 4789}},
	)
	l.Routes = []kernel.Route{{Dst: netip.MustParsePrefix("192.168.80.3/32"), Via: netip.MustParseAddr("192.168.70.3"), Src: netip.MustParseAddr("192.168.80.2"), Dev: 4}}
	a, b := netip.MustParseAddr("192.168.80.2"), netip.MustParseAddr("192.168.80.3")
	sa := func(src, dst netip.Addr, spi uint32, key string) xfrm.StateDetail {
		k, _ := hexKey(key)
		return xfrm.StateDetail{State: xfrm.State{Src: src, Dst: dst, Proto: xfrm.ProtoESP, SPI: spi, Reqid: spi,
			Alg: xfrm.StateAlg{ESN: true, AEAD: AEAD, ICVBits: 128}}, ReplayWindow: 64, KeyBits: 160, KeyDigest: xfrm.KeyDigest(k)}
	}
	l.SAs = []xfrm.StateDetail{sa(a, b, 0x1001, testKeyOut), sa(b, a, 0x1002, testKeyIn)}
	pol := func(dir xfrm.Dir, src, dst netip.Addr, reqid uint32) xfrm.Policy {
		return xfrm.Policy{Dir: dir, Sel: xfrm.Selector{Src: netip.PrefixFrom(src, 32), Dst: netip.PrefixFrom(dst, 32)},
			Tmpls: []xfrm.Tmpl{{Proto: xfrm.ProtoESP, Reqid: reqid}}}
	}
	l.Policies = []xfrm.Policy{pol(xfrm.DirOut, a, b, 0x1001), pol(xfrm.DirIn, b, a, 0x1002)}
	return l
}

func hexKey(s string) ([]byte, error) {
	b := make([]byte, len(s)/2)
	for i := range b {
		var v byte
		for _, c := range s[2*i : 2*i+2] {
			v <<= 4
			switch {
			case c >= '0' && c <= '9':
				v |= byte(c - '0')
			default:
				v |= byte(c-'a') + 10
			}
		}
		b[i] = v
	}
	return b, nil
}

func stepIndex(p *Plan, substr string) int {
	for i, s := range p.Steps {
		if strings.Contains(strings.Join(s.Commands, "\n"), substr) {
			return i
		}
	}
	return -1
}

func TestPlanFromScratch(t *testing.T) {
	h, ks := load(t, seedHost("none", ""))
	p, err := NewPlan(h, ks, bareLive("6.12.95"))
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, s := range p.Steps {
		all = append(all, s.Commands...)
	}
	text := strings.Join(all, "\n")
	for _, want := range []string{
		"ip link add bond0 type bond mode active-backup miimon 100 mtu 9216",
		"ip link set p0 down\nip link set p0 master bond0",
		"ip link set bond0 type bond primary p0",
		"ip addr add 192.168.70.2/24 dev bond0",
		"ip xfrm state add src 192.168.80.2 dst 192.168.80.3 proto esp spi 0x1001 reqid 4097 mode transport replay-window 64 flag esn aead 'rfc4106(gcm(aes))' <redacted> 128",
		"ip xfrm state add src 192.168.80.3 dst 192.168.80.2 proto esp spi 0x1002 reqid 4098",
		"ip xfrm policy add src 192.168.80.2/32 dst 192.168.80.3/32 dir out tmpl proto esp reqid 4097 mode transport",
		"ip xfrm policy add src 192.168.80.3/32 dst 192.168.80.2/32 dir in tmpl proto esp reqid 4098 mode transport",
		"ip addr add 192.168.80.2/32 dev lo",
		"ip route add 192.168.80.3/32 via 192.168.70.3 src 192.168.80.2 proto 115",
		"ip link add vxlan1 type vxlan id 1024 local 192.168.80.2 remote 192.168.80.3 dstport 4789 mtu 3986",
		"ip link set vxlan1 up",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("plan lacks %q:\n%s", want, text)
		}
	}
	// Encryption before connectivity: both SAs, then both policies, and
	// only then the VTEP's address, route and device.
	order := []string{"ip link add bond0", "state add src 192.168.80.2", "state add src 192.168.80.3", "policy add src 192.168.80.2/32",
		"policy add src 192.168.80.3/32", "dev lo", "ip route add", "type vxlan", "ip link set vxlan1 up"}
	for i := 1; i < len(order); i++ {
		if a, b := stepIndex(p, order[i-1]), stepIndex(p, order[i]); a < 0 || b < 0 || a >= b {
			t.Errorf("%q (step %d) must come before %q (step %d)", order[i-1], a, order[i], b)
		}
	}
	// No key material anywhere: commands, JSON, notes.
	j, _ := json.Marshal(p)
	for _, k := range []string{testKeyOut[:10], testKeyIn[:10], "0011223344"} {
		if strings.Contains(text, k) || strings.Contains(string(j), k) {
			t.Fatalf("key material in the plan")
		}
	}
}

func TestPlanNothingToDo(t *testing.T) {
	h, ks := load(t, seedHost("none", ""))
	p, err := NewPlan(h, ks, matchingLive(t))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Empty() {
		t.Fatalf("a matching host gave %d steps: %+v", len(p.Steps), p.Steps)
	}
}

func TestPlanDrift(t *testing.T) {
	h, ks := load(t, seedHost("none", ""))
	for _, tc := range []struct {
		name   string
		mutate func(l *Live)
		want   []string // substrings of "action object: why"
	}{
		{"changed key", func(l *Live) { l.SAs[0].KeyDigest[0] ^= 1 }, []string{"replace SA out 192.168.80.2->192.168.80.3 spi 0x1001: a different key"}},
		{"replay window and ESN", func(l *Live) { l.SAs[1].Alg.ESN, l.SAs[1].ReplayWindow = false, 32 },
			[]string{"replace SA in 192.168.80.3->192.168.80.2 spi 0x1002: esn false, want true, replay window 32, want 64"}},
		{"SA offloaded, file says none", func(l *Live) { l.SAs[0].Offload = &xfrm.Offload{Ifindex: 4} },
			[]string{"replace SA out 192.168.80.2->192.168.80.3 spi 0x1001: offload crypto, want none"}},
		{"policy reqid", func(l *Live) { l.Policies[0].Tmpls[0].Reqid = 7 },
			[]string{"replace policy out 192.168.80.2/32->192.168.80.3/32: template esp reqid 7 mode transport, want esp reqid 4097 mode transport"}},
		{"missing IN policy", func(l *Live) { l.Policies = l.Policies[:1] }, []string{"create policy in 192.168.80.3/32->192.168.80.2/32: missing"}},
		{"VXLAN VNI", func(l *Live) { l.Links[4].VXLAN.VNI = 7 }, []string{"replace vtep vxlan1: vni 7, want 1024", "change link vxlan1: created down"}},
		{"VTEP MTU", func(l *Live) { l.Links[4].MTU = 1500 }, []string{"change link vxlan1: mtu 1500, want 3986"}},
		{"route via", func(l *Live) { l.Routes[0].Via = netip.MustParseAddr("192.168.70.9") },
			[]string{"replace route 192.168.80.3/32: via 192.168.70.9 src 192.168.80.2, want via 192.168.70.3 src 192.168.80.2"}},
		{"bond miimon and MTU", func(l *Live) { l.Links[3].Bond.MIIMon, l.Links[3].MTU = 200, 1500 },
			[]string{"change bond bond0: miimon 200, want 100", "change link bond0: mtu 1500, want 9216"}},
		{"port released", func(l *Live) { l.Links[2].Master = 0 }, []string{"change port p1: not in bond0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := matchingLive(t)
			tc.mutate(l)
			p, err := NewPlan(h, ks, l)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range p.Steps {
				got = append(got, s.Action+" "+s.Object+": "+s.Why)
			}
			text := strings.Join(got, "\n")
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("plan lacks %q:\n%s", w, text)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("%d steps, want %d:\n%s", len(got), len(tc.want), text)
			}
		})
	}
}

func planErr(t *testing.T, h *config.Host, ks *config.Keys, l *Live) string {
	t.Helper()
	_, err := NewPlan(h, ks, l)
	var pe *PlanError
	if !errors.As(err, &pe) {
		t.Fatalf("want a *PlanError, got %v", err)
	}
	return err.Error()
}

func TestPlanBondOffloadGate(t *testing.T) {
	// 6.12: crypto through the bond is refused with the reason.
	h, ks := load(t, seedHost("crypto", "bond0"))
	msg := planErr(t, h, ks, bareLive("6.12.95+deb12-amd64"))
	for _, w := range []string{"offload crypto refused: ESP offload through bond bond0 is broken on Linux 6.12.95+deb12-amd64",
		"xso.real_dev", "offload-dev: <port>", "unsafe-bond-offload"} {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q:\n%s", w, msg)
		}
	}
	// auto skips offload and says why.
	h, ks = load(t, seedHost("auto", "bond0"))
	p, err := NewPlan(h, ks, bareLive("6.12.95"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(p.Notes, "\n"), "offload auto -> none: ESP offload through bond bond0 is broken") {
		t.Errorf("notes %v", p.Notes)
	}
	if i := stepIndex(p, "offload dev"); i >= 0 {
		t.Errorf("auto on a broken bond still offloads: %v", p.Steps[i].Commands)
	}
	// 6.16 and 6.6: allowed; the bond's ESP features are turned on before
	// the first SA.
	for _, rel := range []string{"6.16.1", "6.6.58"} {
		h, ks = load(t, seedHost("crypto", "bond0"))
		p, err = NewPlan(h, ks, bareLive(rel))
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		feat, sa := stepIndex(p, "ethtool -K bond0 esp-hw-offload on esp-tx-csum-hw-offload on"), stepIndex(p, "offload dev bond0 dir out")
		if feat < 0 || sa < 0 || feat > sa {
			t.Errorf("%s: features step %d, SA step %d", rel, feat, sa)
		}
		if stepIndex(p, "offload dev bond0 dir in") < 0 {
			t.Errorf("%s: no inbound offloaded SA", rel)
		}
	}
	// The override.
	h, ks = load(t, strings.Replace(seedHost("crypto", "bond0"), "ipsec:\n", "ipsec:\n  unsafe-bond-offload: true\n", 1))
	if _, err := NewPlan(h, ks, bareLive("6.12.95")); err != nil {
		t.Fatalf("unsafe-bond-offload: %v", err)
	}
}

func TestPlanAutoAndPacketCommands(t *testing.T) {
	h, ks := load(t, seedHost("packet", "p0")+acceptBondLeak)
	p, err := NewPlan(h, ks, bareLive("6.12.95"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"offload packet dev p0 dir out", "offload packet dev p0 dir in",
		"ip xfrm policy add src 192.168.80.2/32 dst 192.168.80.3/32 dir out tmpl proto esp reqid 4097 mode transport offload packet dev p0"} {
		if stepIndex(p, w) < 0 {
			t.Errorf("packet plan lacks %q", w)
		}
	}
	h, ks = load(t, seedHost("auto", "p0"))
	p, err = NewPlan(h, ks, bareLive("6.12.95"))
	if err != nil {
		t.Fatal(err)
	}
	i := stepIndex(p, "# auto: try packet")
	if i < 0 || !strings.Contains(strings.Join(p.Steps[i].Commands, "\n"), "# auto: try crypto") {
		t.Fatalf("auto step: %+v", p.Steps)
	}
	// A live SA obtained by auto (crypto) is not churned.
	l := matchingLive(t)
	l.Links[1].Name = "p0"
	for i := range l.SAs {
		l.SAs[i].Offload = &xfrm.Offload{Ifindex: 2}
	}
	l.SAs[1].Offload.Flags = xfrm.OffloadInbound
	if p, err = NewPlan(h, ks, l); err != nil || !p.Empty() {
		t.Fatalf("auto over crypto-offloaded SAs: %v %+v", err, p)
	}
}

func TestPlanMTURefused(t *testing.T) {
	body := strings.Replace(seedHost("none", ""), "mtu: 3986", "mtu: 9200", 1)
	h, ks := load(t, body)
	msg := planErr(t, h, ks, bareLive("6.12.95"))
	// 9200 + 84 = 9284 > 9216; the largest is 9132.
	for _, w := range []string{"mtu 9200 does not fit the uplink MTU 9216", "= 9284", "use mtu 9132 or less", "raise uplinks.mtu to 9284"} {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q:\n%s", w, msg)
		}
	}
	// Without mtu, the VTEP gets the largest that fits and the plan says
	// how it was computed.
	h, ks = load(t, strings.Replace(seedHost("none", ""), "    mtu: 3986\n", "", 1))
	p, err := NewPlan(h, ks, bareLive("6.12.95"))
	if err != nil {
		t.Fatal(err)
	}
	if stepIndex(p, "dstport 4789 mtu 9132") < 0 || !strings.Contains(strings.Join(p.Notes, "\n"), "MTU 9132 computed for uplink MTU 9216") {
		t.Fatalf("computed MTU: notes %v", p.Notes)
	}
}

func TestPlanRefusals(t *testing.T) {
	h, ks := load(t, seedHost("none", ""))
	l := bareLive("6.12.95")
	l.Links = l.Links[:2] // no p1
	if msg := planErr(t, h, ks, l); !strings.Contains(msg, "uplinks.ports: p1: no such interface here") {
		t.Errorf("missing port: %s", msg)
	}
	l = bareLive("6.12.95")
	l.Links = append(l.Links, kernel.LinkConfig{Name: "bond0", Index: 9, Kind: "veth"})
	if msg := planErr(t, h, ks, l); !strings.Contains(msg, "bond0 exists and is a veth device, not a bond") {
		t.Errorf("bond0 a veth: %s", msg)
	}
	l = bareLive("6.12.95")
	l.Links = append(l.Links, kernel.LinkConfig{Name: "bond0", Index: 9, Kind: "bond", Bond: &kernel.BondConfig{Mode: "802.3ad"}})
	if msg := planErr(t, h, ks, l); !strings.Contains(msg, "exists in mode 802.3ad") {
		t.Errorf("LACP bond: %s", msg)
	}
	l = bareLive("6.12.95")
	l.Links = append(l.Links, kernel.LinkConfig{Name: "br9", Index: 9, Kind: "bridge"})
	l.Links[1].Master = 9
	if msg := planErr(t, h, ks, l); !strings.Contains(msg, "p0 is already enslaved to br9") {
		t.Errorf("enslaved port: %s", msg)
	}
}

// SR-IOV order: VFs to 0 before the modes change, flow steering in legacy
// mode, the eswitch, then the VFs and their settings.
func TestPlanSRIOVOrder(t *testing.T) {
	body := `sriov:
  - pf: pf0
    vfs: 4
    eswitch: switchdev
    flow-steering-mode: dmfs
    vf:
      - {index: 0, mac: "02:00:00:00:00:01", vlan: 10, trust: true}
`
	h, _ := load(t, body)
	base := func(mode string) *Live {
		l := bareLive("6.12.95")
		l.Links = append(l.Links, kernel.LinkConfig{Name: "pf0", Index: 7, Bus: "pci", Device: "0000:03:00.0",
			VFs: []kernel.VFConfig{{Index: 0, MAC: "00:00:00:00:00:00"}, {Index: 1}}})
		l.NumVFs = map[string]int{"pf0": 2}
		l.Eswitch = map[string]string{"pci/0000:03:00.0": mode}
		l.Params = map[string]map[string]string{"pci/0000:03:00.0": {"flow_steering_mode": "smfs"}}
		return l
	}
	check := func(l *Live, want []string) {
		t.Helper()
		p, err := NewPlan(h, nil, l)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range p.Steps {
			got = append(got, s.Commands...)
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	check(base("legacy"), []string{
		"echo 0 > /sys/class/net/pf0/device/sriov_numvfs",
		"devlink dev param set pci/0000:03:00.0 name flow_steering_mode value dmfs cmode runtime",
		"devlink dev eswitch set pci/0000:03:00.0 mode switchdev",
		"echo 4 > /sys/class/net/pf0/device/sriov_numvfs",
		"ip link set pf0 vf 0 mac 02:00:00:00:00:01 vlan 10 trust on",
	})
	// Already in switchdev: back to legacy for the parameter (the ConnectX-6 SR-IOV guide).
	check(base("switchdev"), []string{
		"echo 0 > /sys/class/net/pf0/device/sriov_numvfs",
		"devlink dev eswitch set pci/0000:03:00.0 mode legacy",
		"devlink dev param set pci/0000:03:00.0 name flow_steering_mode value dmfs cmode runtime",
		"devlink dev eswitch set pci/0000:03:00.0 mode switchdev",
		"echo 4 > /sys/class/net/pf0/device/sriov_numvfs",
		"ip link set pf0 vf 0 mac 02:00:00:00:00:01 vlan 10 trust on",
	})
	// Modes right, count wrong: through 0, and the eswitch ensured (VF
	// count 0 resets it on netdevsim and mlx5).
	l := base("switchdev")
	l.Params["pci/0000:03:00.0"]["flow_steering_mode"] = "dmfs"
	check(l, []string{
		"echo 0 > /sys/class/net/pf0/device/sriov_numvfs",
		"devlink dev eswitch set pci/0000:03:00.0 mode switchdev",
		"echo 4 > /sys/class/net/pf0/device/sriov_numvfs",
		"ip link set pf0 vf 0 mac 02:00:00:00:00:01 vlan 10 trust on",
	})
	// Everything right: nothing.
	l.NumVFs["pf0"] = 4
	l.Links[len(l.Links)-1].VFs[0] = kernel.VFConfig{Index: 0, MAC: "02:00:00:00:00:01", VLAN: 10, Trust: true}
	check(l, nil)
	// A NIC without the parameter.
	delete(l.Params, "pci/0000:03:00.0")
	if msg := planErr(t, h, nil, l); !strings.Contains(msg, "has no devlink parameter flow_steering_mode") {
		t.Errorf("no parameter: %s", msg)
	}
}

func TestTeardownWithoutJournal(t *testing.T) {
	h, _ := load(t, seedHost("none", ""))
	p := NewTeardown(h, matchingLive(t), &Journal{}, false)
	var got []string
	for _, s := range p.Steps {
		got = append(got, s.Commands...)
	}
	want := []string{
		"ip link del vxlan1",
		"ip route del 192.168.80.3/32",
		"ip addr del 192.168.80.2/32 dev lo",
		"ip xfrm policy delete src 192.168.80.2/32 dst 192.168.80.3/32 dir out",
		"ip xfrm policy delete src 192.168.80.3/32 dst 192.168.80.2/32 dir in",
		"ip xfrm state delete src 192.168.80.2 dst 192.168.80.3 proto esp spi 0x1001",
		"ip xfrm state delete src 192.168.80.3 dst 192.168.80.2 proto esp spi 0x1002",
		"ip link del bond0",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("teardown:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(strings.Join(p.Notes, " "), "no journal") {
		t.Errorf("notes %v", p.Notes)
	}
	// With a journal that created nothing, nothing is removed.
	p = NewTeardown(h, matchingLive(t), &Journal{path: "/nonexistent"}, true)
	for _, s := range p.Steps {
		if s.Action == "delete" && s.Object != "journal" {
			t.Errorf("removes %s, which apply did not create", s.Object)
		}
	}
}

func TestBondOffloadBroken(t *testing.T) {
	for rel, want := range map[string]bool{"6.12.95+deb12-amd64": true, "6.11.0": true, "6.15.9": true, "6.16.0": false,
		"6.18.2": false, "6.6.58": false, "5.15.0-91-generic": false, "garbage": false} {
		if got := bondOffloadBroken(rel); got != want {
			t.Errorf("%s: %v, want %v", rel, got, want)
		}
	}
}

// Two VTEPs with different VNIs may share one local address (the lab's
// overlay-pair: one VTEP address on h0, one VXLAN per tunnel): the address
// is added to lo once and, in a teardown, deleted once.
func TestPlanSharedVTEPLocal(t *testing.T) {
	body := strings.Replace(seedHost("none", ""), "    mtu: 3986\n", `    mtu: 3986
  - name: vxlan2
    vni: 1025
    local: 192.168.80.2
    remotes: [{address: 192.168.80.3}]
    mtu: 3986
`, 1)
	h, ks := load(t, body)
	p, err := NewPlan(h, ks, bareLive("6.12.95"))
	if err != nil {
		t.Fatal(err)
	}
	count := func(steps []Step, cmd string) (n int) {
		for _, s := range steps {
			for _, c := range s.Commands {
				if c == cmd {
					n++
				}
			}
		}
		return n
	}
	if n := count(p.Steps, "ip addr add 192.168.80.2/32 dev lo"); n != 1 {
		t.Errorf("the shared local is added %d times, want once", n)
	}
	if stepIndex(p, "ip link add vxlan2 type vxlan id 1025 local 192.168.80.2") < 0 {
		t.Errorf("no second VTEP in the plan")
	}
	live := matchingLive(t)
	td := NewTeardown(h, live, &Journal{}, false)
	if n := count(td.Steps, "ip addr del 192.168.80.2/32 dev lo"); n != 1 {
		t.Errorf("the shared local is deleted %d times, want once", n)
	}
}

// A VF that existed before apply gets its own settings back on teardown:
// the oldest recorded value (apply may have run twice), after the VF count
// is restored.
func TestTeardownRestoresVFSettings(t *testing.T) {
	h, _ := load(t, seedHost("none", ""))
	j := &Journal{path: "/nonexistent", Changed: []entry{
		{Kind: kindVF, Link: "p0", VF: 1, Old: "mac=02:00:00:00:00:09 vlan=0 trust=off spoofchk=on"},
		{Kind: kindVF, Link: "p0", VF: 1, Old: "mac=02:00:00:00:00:aa"}, // the second apply's
		{Kind: kindNumVFs, Link: "p0", Old: "2", New: "4"},
	}}
	p := NewTeardown(h, matchingLive(t), j, true)
	var got []string
	for _, s := range p.Steps {
		got = append(got, s.Commands...)
	}
	text := strings.Join(got, "\n")
	want := "ip link set p0 vf 1 mac 02:00:00:00:00:09 vlan 0 trust off spoofchk on"
	if !strings.Contains(text, want) || strings.Contains(text, "02:00:00:00:00:aa") {
		t.Fatalf("teardown:\n%s\nwant %q (the value before the first apply)", text, want)
	}
	if strings.Index(text, "echo 2 > /sys/class/net/p0/device/sriov_numvfs") > strings.Index(text, want) {
		t.Fatalf("VF settings restored before the VF count:\n%s", text)
	}
}

// TestPlanNewBondDefaultMTU: without uplinks.mtu, a bond the plan creates
// gets the kernel's 1500 and imposes it on its ports, so the VTEP MTU is
// planned for 1500 from the first plan; before, the first apply left the
// VTEP at 1500 and the second plan changed it (seen applying seed 000's
// layout on the NIC model).
func TestPlanNewBondDefaultMTU(t *testing.T) {
	body := strings.NewReplacer("  mtu: 9216\n", "", "    mtu: 3986\n", "").Replace(seedHost("none", ""))
	h, ks := load(t, body)
	p, err := NewPlan(h, ks, bareLive("6.12.95"))
	if err != nil {
		t.Fatal(err)
	}
	i := stepIndex(p, "ip link add vxlan1 type vxlan")
	if i < 0 {
		t.Fatalf("no VTEP step: %v", p.Steps)
	}
	if c := strings.Join(p.Steps[i].Commands, "\n"); !strings.Contains(c, "mtu 1416") {
		t.Errorf("VTEP created without the MTU a 1500-byte bond carries (1416): %s", c)
	}
}
