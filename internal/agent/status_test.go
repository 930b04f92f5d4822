// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sluice/internal/fleet"
	"sluice/internal/fleet/v1alpha1"
)

// A member left out of this host's peers (fleet.Render's LeftOut) shows
// in the PeersComplete condition, while the rest is Ready.
func TestStatusPeersLeftOut(t *testing.T) {
	a := &Agent{}
	me := &v1alpha1.Host{ObjectMeta: metav1.ObjectMeta{Name: "a", Generation: 3}}
	why := "host far left out: its underlay address 198.51.100.3 is outside this host's underlay subnet 192.0.2.0/24"
	st := a.status(me, fleet.Desired{Problems: []string{why}, LeftOut: []string{why}}, Outcome{Result: ResultApplied})
	c := meta.FindStatusCondition(st.Conditions, "PeersComplete")
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "PeersLeftOut" || !strings.Contains(c.Message, why) {
		t.Fatalf("PeersComplete: %+v", c)
	}
	if r := meta.FindStatusCondition(st.Conditions, "Ready"); r == nil || r.Status != metav1.ConditionTrue {
		t.Fatalf("Ready: %+v", r)
	}
	st = a.status(me, fleet.Desired{}, Outcome{Result: ResultApplied})
	if c := meta.FindStatusCondition(st.Conditions, "PeersComplete"); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("PeersComplete with every member a peer: %+v", c)
	}
}

// The same failure again writes no new status: lastApply keeps its time,
// so the status bytes (what writeStatus compares) do not change, and a
// failing fleet does not feed itself status-write events. A watch event
// with nothing new to render does not retry a failed reconcile either
// (the interval does).
func TestFailedStatusNotRewritten(t *testing.T) {
	a := &Agent{}
	me := &v1alpha1.Host{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	out := Outcome{Result: ResultFailed, Digest: "0123456789ab", Message: "route 10.99.0.3/32 via 198.51.100.3: invalid gateway; rolled back"}
	first, _ := json.Marshal(a.status(me, fleet.Desired{}, out))
	time.Sleep(1100 * time.Millisecond) // lastApply.time has 1 s resolution
	again, _ := json.Marshal(a.status(me, fleet.Desired{}, out))
	if string(first) != string(again) {
		t.Fatalf("the same failure rewrote the status:\n%s\n%s", first, again)
	}
	out.Message = "another failure"
	if other, _ := json.Marshal(a.status(me, fleet.Desired{}, out)); string(other) == string(first) {
		t.Fatal("a new failure did not change the status")
	}
	a.lastKey, a.lastOutcome = "k", out
	if !a.unchanged(false, "k") {
		t.Error("a watch event with nothing new retries a failed reconcile")
	}
	if a.unchanged(true, "k") || a.unchanged(false, "k2") {
		t.Error("a full reconcile or a new desired state is skipped")
	}
}
