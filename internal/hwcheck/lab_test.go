// SPDX-License-Identifier: Apache-2.0

package hwcheck

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"sluice/internal/testutil"
)

// TestRunReturnsThePorts on the host kernel, which has no ESP: a veth
// pair passes the cable check, every SA is refused, so each scenario that
// runs is inconclusive (never "model = hardware"), and the ports are back
// in the caller's namespace with their up/down state, no address and no
// XDP. A port with an address is refused before anything moves.
func TestRunReturnsThePorts(t *testing.T) {
	testutil.RequireRoot(t, "moves veth ports between namespaces")
	ns, _ := testutil.NewNetNS(t)
	testutil.Run(t, "ip", "-n", ns, "link", "add", "pa", "type", "veth", "peer", "name", "pb")
	testutil.Run(t, "ip", "-n", ns, "link", "set", "pa", "up")
	var rep Report
	var err error
	testutil.InNetns(t, ns, func() {
		rep, err = Run(context.Background(), Options{Port: "pa", Peer: "pb", Profile: "mlx5-6.12",
			Only: []string{"subnet-selector", "sa-deleted-under-xdp", "bond-failover"}})
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Rows) != 3 || !rep.Failed() {
		t.Fatalf("rows %+v: want 3, the run failed (no ESP on this kernel)", rep.Rows)
	}
	for _, r := range rep.Rows[:2] {
		if r.Verdict != Inconclusive || !strings.Contains(r.Why, "could not set up") {
			t.Errorf("%s: %s %s; want inconclusive: the SA cannot be added here", r.Scenario, r.Verdict, r.Why)
		}
	}
	if r := rep.Rows[2]; r.Verdict != NotRun || !strings.Contains(r.Why, "two port pairs") {
		t.Errorf("bond-failover: %s %s; want not run, saying what it needs", r.Verdict, r.Why)
	}
	for p, up := range map[string]bool{"pa": true, "pb": false} {
		out := testutil.Run(t, "ip", "-n", ns, "-o", "link", "show", p)
		if strings.Contains(out, ",UP") != up || strings.Contains(out, "xdp") {
			t.Errorf("%s after the run: %s; want up %v, no XDP", p, out, up)
		}
		if out := testutil.Run(t, "ip", "-n", ns, "-o", "-4", "addr", "show", p); out != "" {
			t.Errorf("%s after the run has an address: %s", p, out)
		}
	}
	testutil.Run(t, "ip", "-n", ns, "addr", "add", "198.51.100.1/24", "dev", "pb")
	testutil.InNetns(t, ns, func() {
		_, err = Run(context.Background(), Options{Port: "pa", Peer: "pb"})
	})
	if err == nil || !strings.Contains(err.Error(), "pb has address 198.51.100.1/24") {
		t.Errorf("a peer with an address: %v, want refused naming the address", err)
	}
	if out := testutil.Run(t, "ip", "-n", ns, "-o", "link", "show", "pa"); !strings.Contains(out, "pa@pb") {
		t.Errorf("pa moved although the run was refused: %s", out)
	}
}

// TestRunInterrupted: an interrupt (the command's context, cancelled by
// SIGINT) while the run waits for a carrier that never comes returns
// the ports to the caller's namespace before Run returns.
func TestRunInterrupted(t *testing.T) {
	testutil.RequireRoot(t, "moves veth ports between namespaces")
	ns, _ := testutil.NewNetNS(t)
	// Two veths whose other ends stay down: no carrier on pa or pb.
	testutil.Run(t, "ip", "-n", ns, "link", "add", "pa", "type", "veth", "peer", "name", "xa")
	testutil.Run(t, "ip", "-n", ns, "link", "add", "pb", "type", "veth", "peer", "name", "xb")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var err error
	testutil.InNetns(t, ns, func() { _, err = Run(ctx, Options{Port: "pa", Peer: "pb"}) })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run interrupted while waiting for carrier: %v", err)
	}
	for _, p := range []string{"pa", "pb"} {
		if _, err := testutil.Try("ip", "-n", ns, "link", "show", p); err != nil {
			t.Errorf("%s is not back in the caller's namespace: %v", p, err)
		}
	}
}
