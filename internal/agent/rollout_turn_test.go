// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"strings"
	"testing"
	"time"

	"sluice/internal/fleet/v1alpha1"
)

// Batches of maxUnavailable hosts by name: a host's turn comes when every
// host of the batches before its own reports the target Done; a host of
// its own batch does not hold it; a failed host ahead holds it and is
// named.
func TestRolloutTurnBatches(t *testing.T) {
	_, ovs, hosts, _ := guardFleet(t) // hv-a .. hv-e
	o := &ovs[0]
	o.Spec.Rollout.MaxUnavailable = 2
	const target = "offload=none rekeyTime=2h0m0s lifeTime=2h12m0s"
	set := func(name, settings, state, msg string) {
		for i := range hosts {
			if hosts[i].Name == name {
				hosts[i].Status.Rollout = &v1alpha1.HostRollout{Overlay: "prod", Settings: settings, State: state, Message: msg}
			}
		}
	}
	for _, n := range []string{"hv-a", "hv-b", "hv-c", "hv-d", "hv-e"} {
		set(n, "old", v1alpha1.RolloutWaiting, "")
	}
	for _, n := range []string{"hv-a", "hv-b"} {
		if ok, why, _, _ := turn(n, o, hosts, target); !ok {
			t.Errorf("%s (first batch) waits: %s", n, why)
		}
	}
	ok, why, failed, batch := turn("hv-c", o, hosts, target)
	if ok || failed || batch != "batch 2 of 3, 2 host(s) at a time, by name" || !strings.Contains(why, "hv-a has not applied it yet") {
		t.Errorf("hv-c before the first batch is done: %v %q", ok, why)
	}
	set("hv-a", target, v1alpha1.RolloutDone, "")
	set("hv-b", target, v1alpha1.RolloutProgressing, "")
	if ok, why, _, _ := turn("hv-d", o, hosts, target); ok || !strings.Contains(why, "hv-b's tunnels are not back up yet") {
		t.Errorf("hv-d with hv-b progressing: %v %q", ok, why)
	}
	set("hv-b", target, v1alpha1.RolloutDone, "")
	for _, n := range []string{"hv-c", "hv-d"} {
		if ok, why, _, _ := turn(n, o, hosts, target); !ok {
			t.Errorf("%s (second batch) waits: %s", n, why)
		}
	}
	set("hv-d", "old", v1alpha1.RolloutFailed, "charon is down")
	ok, why, failed, _ = turn("hv-e", o, hosts, target)
	if ok || !failed || !strings.Contains(why, "host hv-d failed the rollout") || !strings.Contains(why, "charon is down") {
		t.Errorf("hv-e behind a failed hv-d: %v %v %q", ok, failed, why)
	}
	// A host that never reported (no agent) holds the rollout too.
	hosts[0].Status.Rollout = nil
	if ok, why, _, _ := turn("hv-c", o, hosts, target); ok || !strings.Contains(why, "hv-a has not reported") {
		t.Errorf("hv-c with hv-a silent: %v %q", ok, why)
	}
}

// A host that applied the new settings is Progressing until every tunnel
// that was up before is up again (Done), and Failed once they stay down
// past the deadline.
func TestRolloutTunnelsBackUp(t *testing.T) {
	a, ovs, _, _ := guardFleet(t)
	a.Metrics = NewMetrics()
	o := &ovs[0]
	o.Spec.Rollout.ProgressDeadlineSeconds = 60
	held, ok := a.heldSettings("sluice-system/prod")
	if !ok {
		t.Fatal("no held settings in the guard fleet")
	}
	a.firstSeen = map[string]time.Time{"hv-b": {}, "hv-c": {}}
	a.roll = &rollout{overlay: "prod", target: held.String(), state: v1alpha1.RolloutWaiting, turn: true, upBefore: []string{"hv-b", "hv-gone"}}
	a.staged(o, Outcome{Result: ResultApplied})
	if a.roll.state != v1alpha1.RolloutProgressing || !strings.Contains(a.roll.message, "tunnels to hv-b to come back") {
		t.Fatalf("applied, hv-b down: %+v", a.roll)
	}
	a.roll.applied = time.Now().Add(-2 * time.Minute)
	a.staged(o, Outcome{Result: ResultNothingToDo})
	if a.roll.state != v1alpha1.RolloutFailed || !strings.Contains(a.roll.message, "not back up after 1m0s") {
		t.Fatalf("past the deadline: %+v", a.roll)
	}
	if st, _ := a.rolloutState(); st != v1alpha1.RolloutFailed {
		t.Fatalf("rollout state %q", st)
	}
	a.lastTruth = []SATruth{{Peer: "hv-b", Dir: "in"}, {Peer: "hv-b", Dir: "out"}}
	a.staged(o, Outcome{Result: ResultNothingToDo})
	if a.roll.state != v1alpha1.RolloutDone {
		t.Fatalf("hv-b back up: %+v", a.roll)
	}
}
