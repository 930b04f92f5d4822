// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"net/netip"
	"strings"
	"testing"

	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// offload-in/offload-out (the ixgbevf VF-offload patches: an ixgbevf offloads inbound only):
// each SA gets its own mode.
func TestPlanOffloadPerDirection(t *testing.T) {
	h, ks := load(t, strings.Replace(seedHost("none", "p1"), "      offload: none\n", "      offload-in: crypto\n", 1))
	p, err := NewPlan(h, ks, bareLive("6.12.95"))
	if err != nil {
		t.Fatal(err)
	}
	if stepIndex(p, "offload dev p1 dir in") < 0 {
		t.Errorf("no inbound offloaded SA: %+v", p.Steps)
	}
	if stepIndex(p, "offload dev p1 dir out") >= 0 {
		t.Errorf("the outbound SA is offloaded although offload-out defaults to offload: none")
	}
	// auto per direction: outbound auto, inbound none.
	h, ks = load(t, strings.Replace(seedHost("none", "p1"), "      offload: none\n", "      offload-out: auto\n", 1))
	if p, err = NewPlan(h, ks, bareLive("6.12.95")); err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(p.Notes, "\n")
	if !strings.Contains(notes, "offload-out auto on p1: apply tries packet, then crypto, then none for the out SA") || strings.Contains(notes, "for the in SA") {
		t.Errorf("notes:\n%s", notes)
	}
}

// Seed 000 offloads its SAs to one port of the bond: plan says that a
// failover leaves them behind, and what to do on this kernel.
func TestPlanBondPortOffloadWarns(t *testing.T) {
	for rel, fix := range map[string]string{"6.12.95": "use offload: none for SAs carried by bond0", "6.16.1": "offload to the bond itself (offload-dev: bond0"} {
		h, ks := load(t, seedHost("crypto", "p0"))
		p, err := NewPlan(h, ks, bareLive(rel))
		if err != nil {
			t.Fatal(err)
		}
		notes := strings.Join(p.Notes, "\n")
		for _, w := range []string{"offload-dev p0 is a port of active-backup bond bond0", "the bond does not move them at failover", fix} {
			if !strings.Contains(notes, w) {
				t.Errorf("%s: notes lack %q:\n%s", rel, w, notes)
			}
		}
	}
	// Not a bond port: no warning.
	h, ks := load(t, noBond(seedHost("crypto", "p0")))
	if p, err := NewPlan(h, ks, bareLive("6.12.95")); err == nil && strings.Contains(strings.Join(p.Notes, "\n"), "is a port of") {
		t.Errorf("warned about a port outside any bond: %v", p.Notes)
	}
}

// The SA budget: SAs the file adds plus those installed, per SA table,
// against the driver's limit (netdevsim 33 per port; ixgbe 1024 Rx +
// 1024 Tx shared by the PF and its VFs).
func TestPlanSABudget(t *testing.T) {
	installed := func(l *Live, dev int, n int, inbound bool) {
		for i := 0; i < n; i++ {
			o := &xfrm.Offload{Ifindex: dev}
			if inbound {
				o.Flags = xfrm.OffloadInbound
			}
			l.SAs = append(l.SAs, xfrm.StateDetail{State: xfrm.State{Src: netip.MustParseAddr("10.9.0.1"), Dst: netip.MustParseAddr("10.9.0.2"),
				Proto: xfrm.ProtoESP, SPI: uint32(0x9000 + i), Offload: o}})
		}
	}
	notes := func(l *Live) string {
		t.Helper()
		h, ks := load(t, noBond(seedHost("crypto", "p1")))
		p, err := NewPlan(h, ks, l)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(p.Notes, "\n")
	}
	for _, tc := range []struct {
		installed int
		want      string
	}{
		{10, ""},
		{26, "SA budget nearly full: p1 (netdevsim, shared by one port): 28 of 33 SAs (26 installed + 2 from the configuration)"},
		{32, "SA budget over the limit: the SAs beyond it are refused"},
	} {
		l := bareLive("6.12.95")
		l.OffloadHW = map[string]OffloadHW{"p1": {Driver: "netdevsim", Family: "p1"}}
		installed(l, 3, tc.installed, false)
		got := notes(l)
		if (tc.want == "") != !strings.Contains(got, "SA budget") || !strings.Contains(got, tc.want) {
			t.Errorf("%d installed: notes\n%s\nwant %q", tc.installed, got, tc.want)
		}
	}
	// ixgbe: a VF's inbound SAs fill its PF's Rx table.
	l := bareLive("6.12.95")
	l.Links = append(l.Links, kernel.LinkConfig{Name: "vf0", Index: 9})
	l.OffloadHW = map[string]OffloadHW{"p1": {Driver: "ixgbe", Family: "PF 0000:03:00.0"}, "vf0": {Driver: "ixgbevf", Family: "PF 0000:03:00.0"}}
	installed(l, 9, 1024, true)
	if got := notes(l); !strings.Contains(got, "SA budget over the limit") || !strings.Contains(got, "PF 0000:03:00.0 (ixgbe, shared by the PF and all its VFs") ||
		!strings.Contains(got, "1025 of 1024 Rx SAs, 1 of 1024 Tx SAs") || !strings.Contains(got, "Devices p1, vf0") {
		t.Errorf("ixgbe family:\n%s", got)
	}
}

// noBond is seedHost on port p1 alone.
func noBond(s string) string {
	s = strings.Replace(s, "  bond: {name: bond0, primary: p0}\n", "", 1)
	return strings.Replace(s, "  ports: [p0, p1]\n", "  ports: [p1]\n", 1)
}
