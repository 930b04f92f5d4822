// SPDX-License-Identifier: Apache-2.0

package fleet_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	. "sluice/internal/fleet"
	"sluice/internal/fleet/kubetest"
)

// denied fails unless err is a refusal whose message says want.
func denied(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted", what)
		return
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("%s: refused, but the message does not say %q:\n%v", what, want, err)
	}
}

func hostsOf(t *testing.T, cfg *rest.Config, ns string) dynamic.ResourceInterface {
	t.Helper()
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c.Resource(HostsGVR).Namespace(ns)
}

// mutate reads Host name through c, changes it with f and writes it back
// (status: through the status subresource).
func mutate(c dynamic.ResourceInterface, name string, status bool, f func(u *unstructured.Unstructured)) error {
	ctx := context.Background()
	u, err := c.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	f(u)
	if status {
		_, err = c.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	} else {
		_, err = c.Update(ctx, u, metav1.UpdateOptions{})
	}
	return err
}

func labelled(spec map[string]any, name, ns string, lbl map[string]string) *unstructured.Unstructured {
	u := obj("Host", name, spec)
	u.SetNamespace(ns)
	u.SetLabels(lbl)
	return u
}

// An attacker holding one node's agent credential, the DaemonSet's
// pod-bound ServiceAccount token, tries what would let it take traffic:
// join an overlay or leave it, move its VTEP (onto a storage VIP), claim
// another node's Host, hold itself in the mesh with a finalizer, and do
// the same from a second deployment in another namespace. The real API
// server refuses each with a message naming what and whose it is; the
// agent's own writes (status, certificate, a Host without labels) pass.
func TestAdmissionAgentOwnsOnlyItsStatus(t *testing.T) {
	s := kubetest.Need(t, kubetest.User{Name: "sluice:host:hv-off", Groups: []string{"sluice:agents"}})
	admin := installDeploy(t, s)
	ctx := context.Background()
	const ns = "sluice-system"
	prod := map[string]string{"sluice.dev/overlay": "prod"}
	if _, err := admin.Resource(OverlaysGVR).Namespace(ns).Create(ctx, obj("Overlay", "prod", validOverlay()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	adminHosts := admin.Resource(HostsGVR).Namespace(ns)
	for _, h := range []struct{ name, vtep, under string }{{"node-a", "10.99.0.1", "192.0.2.1/24"}, {"node-b", "10.99.0.2", "192.0.2.2/24"}} {
		spec := set(set(validHost(), "vtep", h.vtep), "underlay.address", h.under)
		if _, err := adminHosts.Create(ctx, labelled(spec, h.name, ns, prod), metav1.CreateOptions{}); err != nil {
			t.Fatalf("administrator creating %s: %v", h.name, err)
		}
	}
	a := hostsOf(t, s.PodAgent(t, ns, "sluice-agent", "node-a"), ns)

	// The policies are enforced a moment after their creation: wait for
	// the first refusal.
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for {
		err = mutate(a, "node-b", true, func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, []any{"forged"}, "status", "errors")
		})
		if err != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	denied(t, "node-a writing node-b's status", err, "an agent writes only its own Host object: system:serviceaccount:sluice-system:sluice-agent on node node-a may not UPDATE Host node-b")

	// What an agent does: its own status, its certificate.
	if err := mutate(a, "node-a", true, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, []any{"none"}, "status", "errors")
	}); err != nil {
		t.Errorf("node-a writing its own status: %v", err)
	}
	if err := mutate(a, "node-a", false, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, certPEM, "spec", "certificate")
	}); err != nil {
		t.Errorf("node-a publishing its certificate: %v", err)
	}

	// Membership.
	denied(t, "node-a leaving the overlay", mutate(a, "node-a", false, func(u *unstructured.Unstructured) {
		u.SetLabels(nil)
	}), "an agent does not change its Host's labels or finalizers")
	denied(t, "node-a joining another overlay", mutate(a, "node-a", false, func(u *unstructured.Unstructured) {
		u.SetLabels(map[string]string{"sluice.dev/overlay": "prod", "sluice.dev/storage": "yes"})
	}), "may not relabel Host node-a; membership is the administrator's")
	denied(t, "node-a holding itself with a finalizer", mutate(a, "node-a", false, func(u *unstructured.Unstructured) {
		u.SetFinalizers([]string{"evil.example/hold"})
	}), "an agent does not change its Host's labels or finalizers")
	// A status write carries no metadata change either.
	_ = mutate(a, "node-a", true, func(u *unstructured.Unstructured) { u.SetLabels(nil) })
	if u, err := adminHosts.Get(ctx, "node-a", metav1.GetOptions{}); err != nil || u.GetLabels()["sluice.dev/overlay"] != "prod" {
		t.Errorf("node-a relabelled itself through its status: %v %v", u.GetLabels(), err)
	}
	// The Role grants no delete (the policy refuses it too, should a
	// wider Role ever be bound).
	denied(t, "node-a deleting itself", a.Delete(ctx, "node-a", metav1.DeleteOptions{}), `cannot delete resource "hosts"`)

	// Addresses: the VTEP every member routes to it.
	denied(t, "node-a moving its VTEP", mutate(a, "node-a", false, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "10.99.0.53", "spec", "vtep")
	}), "may not change spec.vtep or spec.underlay of Host node-a")
	denied(t, "node-a moving its underlay", mutate(a, "node-a", false, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "192.0.2.99/24", "spec", "underlay", "address")
	}), "may not change spec.vtep or spec.underlay of Host node-a")

	// Another node's Host.
	denied(t, "node-a rewriting node-b", mutate(a, "node-b", false, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "10.99.0.1", "spec", "vtep")
	}), "may not UPDATE Host node-b")
	denied(t, "node-a deleting node-b", a.Delete(ctx, "node-b", metav1.DeleteOptions{}), `cannot delete resource "hosts"`)
	denied(t, "node-a creating node-z", func() error {
		_, err := a.Create(ctx, labelled(validHost(), "node-z", ns, nil), metav1.CreateOptions{})
		return err
	}(), "may not CREATE Host node-z")

	// A node registering itself: without labels only, so it is a member
	// of nothing until the administrator labels it, and that label is
	// checked against the pool.
	c := hostsOf(t, s.PodAgent(t, ns, "sluice-agent", "node-c"), ns)
	vip := set(set(validHost(), "vtep", "10.20.30.40"), "underlay.address", "192.0.2.3/24")
	// (With a VTEP in the pool, so that only the label is wrong: with two
	// policies refusing, the server names either.)
	inPool := set(set(validHost(), "vtep", "10.99.0.3"), "underlay.address", "192.0.2.3/24")
	denied(t, "node-c registering itself into the overlay", func() error {
		_, err := c.Create(ctx, labelled(inPool, "node-c", ns, prod), metav1.CreateOptions{})
		return err
	}(), "an agent creates its Host without labels or finalizers")
	if _, err := c.Create(ctx, labelled(vip, "node-c", ns, nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("node-c registering itself without labels: %v", err)
	}
	off := hostsOf(t, s.Config("sluice:host:hv-off"), ns)
	denied(t, "an off-cluster agent registering into the overlay", func() error {
		_, err := off.Create(ctx, labelled(set(validHost(), "vtep", "10.99.0.9"), "hv-off", ns, prod), metav1.CreateOptions{})
		return err
	}(), "an agent creates its Host without labels or finalizers: sluice:host:hv-off may not create Host hv-off")

	// The pool: whoever writes, a selected Host's VTEP lies in it.
	denied(t, "administrator labelling node-c (VTEP outside the pool)", mutate(adminHosts, "node-c", false, func(u *unstructured.Unstructured) {
		u.SetLabels(prod)
	}), "Host node-c: spec.vtep 10.20.30.40 is outside the vtepPool 10.99.0.0/24 of Overlay prod")
	denied(t, "administrator creating a member outside the pool", func() error {
		_, err := adminHosts.Create(ctx, labelled(set(validHost(), "vtep", "10.20.30.41"), "node-d", ns, prod), metav1.CreateOptions{})
		return err
	}(), "is outside the vtepPool 10.99.0.0/24")
	if _, err := adminHosts.Create(ctx, labelled(set(validHost(), "vtep", "10.20.30.41"), "node-d", ns, map[string]string{"sluice.dev/overlay": "lab"}), metav1.CreateOptions{}); err != nil {
		t.Errorf("a Host no overlay selects is not held to a pool: %v", err)
	}
	// A member being deleted, held by a finalizer: the administrator can
	// still release it (the pool policy must not fail on it).
	held := labelled(set(validHost(), "vtep", "10.99.0.6"), "node-f", ns, prod)
	held.SetFinalizers([]string{"example.com/hold"})
	if _, err := adminHosts.Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := adminHosts.Delete(ctx, "node-f", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := mutate(adminHosts, "node-f", false, func(u *unstructured.Unstructured) { u.SetFinalizers(nil) }); err != nil {
		t.Errorf("administrator releasing a Host being deleted: %v", err)
	}

	// A second deployment in another namespace (rbac.yaml applied with
	// -n fabric2): the same policies hold there.
	const ns2 = "fabric2"
	objs, err := kubetest.ReadManifests("../../deploy/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var again []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "Namespace":
			o.SetName(ns2)
		case "ServiceAccount", "Role", "RoleBinding":
			o.SetNamespace(ns2)
			if o.GetKind() == "RoleBinding" {
				subj, _, _ := unstructured.NestedSlice(o.Object, "subjects")
				for _, sj := range subj {
					if m := sj.(map[string]any); m["kind"] == "ServiceAccount" {
						m["namespace"] = ns2
					}
				}
				_ = unstructured.SetNestedSlice(o.Object, subj, "subjects")
			}
		default:
			continue
		}
		again = append(again, o)
	}
	if err := kubetest.Apply(ctx, admin, again); err != nil {
		t.Fatal(err)
	}
	admin2 := admin.Resource(HostsGVR).Namespace(ns2)
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := admin2.Create(ctx, labelled(validHost(), n, ns2, prod), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a2 := hostsOf(t, s.PodAgent(t, ns2, "sluice-agent", "node-a"), ns2)
	denied(t, "fabric2's node-a rewriting node-b", mutate(a2, "node-b", false, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "10.99.0.7", "spec", "vtep")
	}), "system:serviceaccount:fabric2:sluice-agent on node node-a may not UPDATE Host node-b")
	denied(t, "fabric2's node-a relabelling itself", mutate(a2, "node-a", false, func(u *unstructured.Unstructured) {
		u.SetLabels(nil)
	}), "may not relabel Host node-a")
	// And an agent of one namespace writes nothing in another (RBAC).
	denied(t, "sluice-system's node-a writing in fabric2", mutate(hostsOf(t, s.PodAgent(t, ns, "sluice-agent", "node-e"), ns2), "node-a", true, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, []any{"forged"}, "status", "errors")
	}), "forbidden")
}
