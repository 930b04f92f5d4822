// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sluice/internal/fleet"
	"sluice/internal/fleet/v1alpha1"
)

// guardFleet is five hosts of overlay sluice-system/prod, and an agent
// for hv-a that has applied the 5-host mesh. Its data path is not
// reachable: touched counts the attempts (a teardown would be one).
func guardFleet(t *testing.T) (*Agent, []v1alpha1.Overlay, []v1alpha1.Host, *int) {
	t.Helper()
	var hosts []v1alpha1.Host
	for i, n := range []string{"hv-a", "hv-b", "hv-c", "hv-d", "hv-e"} {
		hosts = append(hosts, v1alpha1.Host{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"sluice.dev/overlay": "prod"},
			CreationTimestamp: metav1.NewTime(time.Unix(int64(1000+i), 0))},
			Spec: v1alpha1.HostSpec{VTEP: "10.99.0." + strconv.Itoa(i+1), Underlay: v1alpha1.Underlay{Address: "192.0.2." + strconv.Itoa(i+1) + "/24", Interface: "eth0"}}})
	}
	ovs := []v1alpha1.Overlay{{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "sluice-system", Generation: 7},
		Spec: v1alpha1.OverlaySpec{Members: metav1.LabelSelector{MatchLabels: map[string]string{"sluice.dev/overlay": "prod"}}, VTEPPool: "10.99.0.0/24",
			Segments: []v1alpha1.Segment{{Name: "t1", VNI: 100}}, Keying: v1alpha1.OverlayKeying{Mode: "ike"}, Offload: v1alpha1.OffloadNone}}}
	l := fleet.Local{Name: "hv-a", CA: "/etc/sluice/ca.pem", Cert: "/etc/sluice/host.pem", PrivKey: "/etc/sluice/host.key"}
	d := fleet.Render("hv-a", ovs, hosts, l)
	if len(d.Peers) != 4 {
		t.Fatalf("the applied mesh: %+v", d)
	}
	touched := 0
	rec := &Reconciler{StateDir: t.TempDir(), name: "hv-a", last: &stored{Doc: d.Doc, File: "fleet-prod.yaml", Digest: d.Digest, Overlay: "sluice-system/prod"},
		InNS: func(func() error) error { touched++; return errors.New("the test's data path is not reachable") }}
	a := &Agent{o: Options{Name: "hv-a", Log: io.Discard, Local: l}, rec: rec}
	return a, ovs, hosts, &touched
}

// A typo in the member selector (it matches no host any more): the agent
// does not tear down; it holds the last applied state and says why and
// how to confirm. Confirmed for the Overlay's generation, it leaves.
func TestMassRemovalHeld(t *testing.T) {
	a, ovs, hosts, touched := guardFleet(t)
	ovs[0].Spec.Members.MatchLabels = map[string]string{"sluice.dev/overlay": "prdo"}
	ovs[0].Generation++
	if d := fleet.Render("hv-a", ovs, hosts, a.o.Local); d.Overlay != nil {
		t.Fatalf("hv-a still selected: %+v", d)
	}
	out := a.notMember(ovs, hosts, &hosts[0])
	if out.Result != ResultHeld || *touched != 0 || !strings.Contains(out.Message, "removes 5 of the 5 members") ||
		!strings.Contains(out.Message, ConfirmRemovalAnnotation+"=8") {
		t.Fatalf("typo in the selector: %+v, data path touched %d time(s)", out, *touched)
	}
	st := a.status(&hosts[0], fleet.Desired{}, out)
	if c := findCondition(st.Conditions, "MassRemovalHeld"); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "spec.members") {
		t.Fatalf("MassRemovalHeld: %+v", c)
	}
	// A confirmation for another generation does not count.
	ovs[0].Annotations = map[string]string{ConfirmRemovalAnnotation: "7"}
	if out := a.notMember(ovs, hosts, &hosts[0]); out.Result != ResultHeld {
		t.Fatalf("confirmed for an older generation: %+v", out)
	}
	ovs[0].Annotations[ConfirmRemovalAnnotation] = "8"
	if out := a.notMember(ovs, hosts, &hosts[0]); out.Result == ResultHeld || *touched == 0 {
		t.Fatalf("confirmed: %+v, data path touched %d time(s)", out, *touched)
	}
}

// The selector now keeps hv-a and one peer of four: hv-a would prune
// three peers at once, and holds. Removing one host is not held, on the
// host that leaves or on the others.
func TestMassRemovalShrinkHeld(t *testing.T) {
	a, ovs, hosts, _ := guardFleet(t)
	for i := 2; i < 5; i++ {
		hosts[i].Labels = map[string]string{"sluice.dev/overlay": "retired"}
	}
	d := fleet.Render("hv-a", ovs, hosts, a.o.Local)
	if why := a.massRemoval(d.Overlay, peerNames(d.Peers), false); !strings.Contains(why, "removes 3 of the 5 members") || !strings.Contains(why, "hv-c, hv-d, hv-e") {
		t.Fatalf("3 of 5 removed: %q", why)
	}
	hosts[2].Labels["sluice.dev/overlay"], hosts[3].Labels["sluice.dev/overlay"] = "prod", "prod"
	d = fleet.Render("hv-a", ovs, hosts, a.o.Local)
	if why := a.massRemoval(d.Overlay, peerNames(d.Peers), false); why != "" {
		t.Fatalf("one host retired is held: %q", why)
	}
	if why := a.massRemoval(&ovs[0], selected(&ovs[0], hosts, "hv-a"), true); why != "" {
		t.Fatalf("hv-a leaving alone is held: %q", why)
	}
}

func findCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}
