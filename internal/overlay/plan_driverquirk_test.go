// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"sluice/internal/driverquirk"
	"sluice/internal/kernel/xfrm"
)

// quirkHost is a host without a bond: one manual peer, packet offload to
// offloadDev, with extra peer lines (mode, selectors, esn, accept-leaks).
func quirkHost(offloadDev, extra string) string {
	return `name: node-a
ipsec:
  keys: node-a.keys
  peers:
    - name: node-b
      local: 192.168.70.2
      remote: 192.168.70.3
      spi-out: 0x1001
      spi-in: 0x1002
      offload: packet
      offload-dev: ` + offloadDev + "\n" + extra
}

const (
	tunnelSubnets = "      mode: tunnel\n      selectors: [{local: 10.0.0.0/24, remote: 10.1.0.0/16}]\n"
	tunnelHosts   = "      mode: tunnel\n      selectors: [{local: 10.0.0.1/32, remote: 10.1.0.9/32}]\n"
	esnOn         = "      esn: true\n      replay-window: 64\n"
	// esnOff: packet offload turns ESN on unless the file says.
	esnOff = "      esn: false\n"
)

// withDriver puts the table's rows for quirks on p0 and p1.
func withDriver(l *Live, driver string, quirks driverquirk.Set) *Live {
	l.OffloadHW = map[string]OffloadHW{}
	for _, d := range []string{"p0", "p1"} {
		l.OffloadHW[d] = OffloadHW{Driver: driver, Family: d, Quirks: quirks}
	}
	return l
}

// TestPlanDriverQuirks: plan refuses a layout that leaks on the driver
// that would carry it (unless accept-leaks names the behaviour), warns
// where only anti-replay is lost, and says nothing on a driver without
// the behaviour (the NIC model's mlx5-upstream profile, a 6.15 mlx5).
func TestPlanDriverQuirks(t *testing.T) {
	mlx5612 := func(release string) *Live {
		return withDriver(bareLive(release), driverquirk.MLX5, driverquirk.For(driverquirk.MLX5, release))
	}
	model := func(profile string) *Live {
		return withDriver(bareLive("6.12.95+deb12-amd64"), driverquirk.ModelDriver, driverquirk.ForModel(profile, "6.12.95+deb12-amd64"))
	}
	for _, tc := range []struct {
		name, host string
		live       *Live
		refused    string // "" when the plan must be made
		note       string // a note the plan must carry ("" none)
		silent     string // text no note or refusal may carry
	}{
		{"subnet selectors on mlx5 6.12", quirkHost("p0", tunnelSubnets+esnOn), mlx5612("6.12.95"),
			"selectors[0] 10.0.0.0/24 -> 10.1.0.0/16 with offload packet on p0 (mlx5_core 6.12.95, Linux 6.12.95)", "", ""},
		{"subnet selectors on the model's mlx5-6.12", quirkHost("p0", tunnelSubnets+esnOn), model("mlx5-6.12"),
			"add exact-selector-match to the peer's accept-leaks", "", ""},
		{"subnet selectors on the model's mlx5-upstream", quirkHost("p0", tunnelSubnets+esnOn), model("mlx5-upstream"),
			"", "", "selector"},
		{"subnet selectors on mlx5 6.15", quirkHost("p0", tunnelSubnets+esnOn), mlx5612("6.15.2"), "", "", "selector"},
		{"host selectors on mlx5 6.12", quirkHost("p0", tunnelHosts+esnOn), mlx5612("6.12.95"), "", "", "selector"},
		{"subnet selectors accepted", quirkHost("p0", tunnelSubnets+esnOn+"      accept-leaks: [exact-selector-match]\n"), mlx5612("6.12.95"),
			"", "Accepted by accept-leaks: exact-selector-match", ""},
		{"an unknown accept-leaks name", quirkHost("p0", esnOn+"      accept-leaks: [subnets]\n"), mlx5612("6.12.95"),
			`accept-leaks: "subnets" is not a leaking driver behaviour`, "", ""},
		{"esn off on mlx5 6.12", quirkHost("p0", esnOff), mlx5612("6.12.95"), "", "esn off with offload packet on p0", ""},
		{"esn off on ixgbe", quirkHost("p0", esnOff), withDriver(bareLive("6.12.95"), "ixgbe", driverquirk.For("ixgbe", "6.12.95")), "", "", "anti-replay"},
		{"packet on a bond on 6.12", seedHost("packet", "bond0"), mlx5612("6.12.95"),
			"Linux 6.12.95 accepts cleartext that matches a packet-offloaded IN policy", "", ""},
		{"packet on a bond on 6.14", seedHost("packet", "bond0"), mlx5612("6.14.3"), "", "", "accepts cleartext"},
		{"non-ESN packet on a bond on mlx5 6.12", strings.Replace(seedHost("packet", "bond0"), "      esn: true\n      replay-window: 64\n", esnOff, 1) + acceptBondLeak, mlx5612("6.12.95"),
			"the driver starts a non-ESN SA at 1 whatever oseq says", "", ""},
		{"non-ESN packet on a bond, accepted", strings.Replace(seedHost("packet", "bond0"), "      esn: true\n      replay-window: 64\n", esnOff, 1) +
			"      accept-leaks: [cleartext-accepted-on-offloaded-in, seq-restarts-at-one]\n", mlx5612("6.12.95"),
			"", "Accepted by accept-leaks: seq-restarts-at-one", ""},
		// esn unset: packet offload turns it on, says so, and the
		// sequence-restart refusal has nothing to refuse.
		{"esn unset, packet on a bond on mlx5 6.12", strings.Replace(seedHost("packet", "bond0"), "      esn: true\n      replay-window: 64\n", "", 1) + acceptBondLeak, mlx5612("6.12.95"),
			"", "esn: true, the default with offload packet", "non-ESN"},
		{"esn unset on mlx5 6.12", quirkHost("p0", ""), mlx5612("6.12.95"), "", "the peer's end needs it too", "anti-replay at all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ks := load(t, tc.host)
			p, err := NewPlan(h, ks, tc.live)
			var said string
			switch {
			case tc.refused != "":
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("plan not refused with %q: %v", tc.refused, err)
				}
				said = err.Error()
			case err != nil:
				t.Fatalf("plan refused: %v", err)
			default:
				said = strings.Join(p.Notes, "\n")
				if tc.note != "" && !strings.Contains(said, tc.note) {
					t.Errorf("no note with %q:\n%s", tc.note, said)
				}
			}
			if tc.silent != "" && strings.Contains(said, tc.silent) {
				t.Errorf("says %q on a driver without the behaviour:\n%s", tc.silent, said)
			}
		})
	}
}

// TestPlanRefusesMovingNonESNSA: moving a live packet-offloaded non-ESN
// SA to another port with its key keeps the sequence number only on a
// driver that honours oseq; mlx5 6.12 restarts at 1 (nonce reuse).
func TestPlanRefusesMovingNonESNSA(t *testing.T) {
	h, ks := load(t, quirkHost("p1", esnOff))
	for _, tc := range []struct {
		driver string
		refuse bool
	}{{driverquirk.MLX5, true}, {"ixgbe", false}} {
		l := withDriver(bareLive("6.12.95"), tc.driver, driverquirk.For(tc.driver, "6.12.95"))
		a, b := netip.MustParseAddr("192.168.70.2"), netip.MustParseAddr("192.168.70.3")
		sa := func(src, dst netip.Addr, spi uint32, key string, flags uint8) xfrm.StateDetail {
			k, _ := hexKey(key)
			return xfrm.StateDetail{State: xfrm.State{Src: src, Dst: dst, Proto: xfrm.ProtoESP, SPI: spi, Reqid: spi,
				Alg: xfrm.StateAlg{AEAD: AEAD, ICVBits: 128}, Offload: &xfrm.Offload{Ifindex: 2, Flags: flags}},
				ReplayWindow: 32, KeyBits: 160, KeyDigest: xfrm.KeyDigest(k)}
		}
		l.SAs = []xfrm.StateDetail{sa(a, b, 0x1001, testKeyOut, xfrm.OffloadPacket), sa(b, a, 0x1002, testKeyIn, xfrm.OffloadPacket|xfrm.OffloadInbound)}
		_, err := NewPlan(h, ks, l)
		got := err != nil && strings.Contains(fmt.Sprint(err), "starts a non-ESN SA at 1 whatever oseq says")
		if got != tc.refuse {
			t.Errorf("%s: moving the OUT SA p0 -> p1: refused %v, want %v (%v)", tc.driver, got, tc.refuse, err)
		}
	}
}
