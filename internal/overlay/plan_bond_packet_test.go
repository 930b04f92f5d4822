// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"strings"
	"testing"

	"sluice/internal/config"
	"sluice/internal/kernel/xfrm"
)

// acceptBondLeak accepts, for seedHost's peer, the silent failover leak
// Linux 6.12 has with packet offload on bond ports (plan_driverquirk.go;
// TestPlanDriverQuirks tests the refusal).
const acceptBondLeak = "      accept-leaks: [cleartext-accepted-on-offloaded-in]\n"

// packetOn marks matchingLive's SAs and policies packet-offloaded to the
// device with ifindex dev.
func packetOn(l *Live, dev int) {
	for i := range l.SAs {
		l.SAs[i].Offload = &xfrm.Offload{Ifindex: dev, Flags: xfrm.OffloadPacket}
		if i == 1 {
			l.SAs[i].Offload.Flags |= xfrm.OffloadInbound
		}
	}
	for i := range l.Policies {
		l.Policies[i].Offload = &xfrm.Offload{Ifindex: dev, Flags: xfrm.OffloadPacket}
	}
}

// TestPlanPacketOffloadToBond: offload: packet with offload-dev: bond0
// goes to the bond's active port (a bond has no policy offload), is not
// refused by the 6.11-6.15 bond gate (the bond's xfrmdev_ops are not
// used), and after a failover the plan moves the SAs and policies to the
// new active port while verify fails until it has.
func TestPlanPacketOffloadToBond(t *testing.T) {
	h, ks := load(t, seedHost("packet", "bond0")+acceptBondLeak)
	p, err := NewPlan(h, ks, bareLive("6.12.95"))
	if err != nil {
		t.Fatalf("packet to a bond on 6.12: %v", err)
	}
	for _, want := range []string{"offload packet dev p0 dir out", "offload packet dev p0 dir in", "mode transport offload packet dev p0"} {
		if stepIndex(p, want) < 0 {
			t.Errorf("no step with %q", want)
		}
	}
	if i := stepIndex(p, "ethtool -K bond0"); i >= 0 {
		t.Errorf("packet offload to the port turns on the bond's ESP features: %v", p.Steps[i].Commands)
	}
	if notes := strings.Join(p.Notes, "\n"); !strings.Contains(notes, "go to its active port p0") {
		t.Errorf("no note on where packet offload to the bond goes:\n%s", notes)
	}

	// Applied, then the bond failed over to p1 (ifindex 3).
	l := matchingLive(t)
	packetOn(l, 2)
	if p, err = NewPlan(h, ks, l); err != nil || !p.Empty() {
		t.Fatalf("applied host plans steps: %v %v", err, p.Steps)
	}
	if r := Verify(h, ks, l); !r.OK {
		t.Fatalf("verify on the applied host: %+v", r.Checks)
	}
	l.Links[3].Bond.Active = 3
	if p, err = NewPlan(h, ks, l); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"offload packet dev p1 dir out", "offload packet dev p1 dir in", "policy update src 192.168.80.2/32 dst 192.168.80.3/32 dir out"} {
		if stepIndex(p, want) < 0 {
			t.Errorf("after failover: no step with %q: %v", want, p.Steps)
		}
	}
	if i := stepIndex(p, "offload packet dev p1 dir out"); i >= 0 && !strings.Contains(p.Steps[i].Why, "offload device p0, want p1 (bond0's active port)") {
		t.Errorf("why: %s", p.Steps[i].Why)
	}
	r := Verify(h, ks, l)
	if r.OK {
		t.Fatal("verify passes with the SAs on the inactive port")
	}
	found := false
	for _, c := range r.Checks {
		if !c.OK && strings.Contains(c.Detail, "packet-offloaded to p0, but bond0's active port is p1") && strings.Contains(c.Detail, "run sluice apply: it moves them to p1") {
			found = true
		}
	}
	if !found {
		t.Errorf("verify does not say the SAs are on the inactive port: %+v", r.Checks)
	}
}

// TestVerifyPacketOnBondPort: seed 000's literal layout (offload-dev: the
// port) after a failover: verify fails and names offload-dev: bond0.
func TestVerifyPacketOnBondPort(t *testing.T) {
	h, ks := load(t, seedHost(config.OffloadModePacket, "p0")+acceptBondLeak)
	l := matchingLive(t)
	packetOn(l, 2)
	if r := Verify(h, ks, l); !r.OK {
		t.Fatalf("verify before the failover: %+v", r.Checks)
	}
	l.Links[3].Bond.Active = 3
	r := Verify(h, ks, l)
	var msgs []string
	for _, c := range r.Checks {
		if !c.OK {
			msgs = append(msgs, c.Detail)
		}
	}
	all := strings.Join(msgs, "\n")
	if r.OK || !strings.Contains(all, "its traffic leaves p1 in cleartext") || !strings.Contains(all, "set offload-dev: bond0") {
		t.Errorf("verify after failover with offload-dev p0: ok=%v\n%s", r.OK, all)
	}
}
