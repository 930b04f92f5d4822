// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sluice/internal/fleet"
	"sluice/internal/fleet/v1alpha1"
)

// Ready is True only when every peer's tunnel is up (its SA pair in the
// kernel), not as soon as the state is applied.
func TestReadyMeansTunnelsUp(t *testing.T) {
	a := &Agent{}
	me := &v1alpha1.Host{ObjectMeta: metav1.ObjectMeta{Name: "hv-a", Generation: 2}}
	d := fleet.Desired{Peers: []fleet.Peer{{Name: "hv-b", VTEP: netip.MustParseAddr("10.99.0.2")}, {Name: "hv-c", VTEP: netip.MustParseAddr("10.99.0.3")}}}
	a.lastTruth = []SATruth{{Peer: "hv-b", Dir: "out", SPI: 1}, {Peer: "hv-b", Dir: "in", SPI: 2}}
	st := a.status(me, d, Outcome{Result: ResultApplied})
	r := meta.FindStatusCondition(st.Conditions, "Ready")
	if r == nil || r.Status != metav1.ConditionFalse || r.Reason != "TunnelsDown" || !strings.Contains(r.Message, "hv-c (Connecting)") || strings.Contains(r.Message, "hv-b") {
		t.Fatalf("one tunnel of two up: Ready %+v", r)
	}
	a.lastTruth = append(a.lastTruth, SATruth{Peer: "hv-c", Dir: "out", SPI: 3}, SATruth{Peer: "hv-c", Dir: "in", SPI: 4})
	st = a.status(me, d, Outcome{Result: ResultNothingToDo})
	if r := meta.FindStatusCondition(st.Conditions, "Ready"); r == nil || r.Status != metav1.ConditionTrue {
		t.Fatalf("every tunnel up: Ready %+v", r)
	}
}
