// SPDX-License-Identifier: Apache-2.0

package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	. "sluice/internal/fleet"
	"sluice/internal/fleet/kubetest"
)

func installDeploy(t testing.TB, s *kubetest.Server) dynamic.Interface {
	return s.Install(t, "../..")
}

func obj(kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "fleet.sluice.dev/v1alpha1", "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": "sluice-system"},
		"spec":     spec,
	}}
}

func validOverlay() map[string]any {
	return map[string]any{
		"members":  map[string]any{"matchLabels": map[string]any{"sluice.dev/overlay": "prod"}},
		"segments": []any{map[string]any{"name": "tenant", "vni": int64(100)}},
		"keying":   map[string]any{"mode": "ike"},
		"vtepPool": "10.99.0.0/24",
	}
}

func validHost() map[string]any {
	return map[string]any{"vtep": "10.99.0.1", "underlay": map[string]any{"address": "192.0.2.1/24", "interface": "eth0"}}
}

// set returns a copy of m with path (dot separated) set to v.
func set(m map[string]any, path string, v any) map[string]any {
	out := deepCopy(m).(map[string]any)
	cur := out
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		cur = cur[p].(map[string]any)
	}
	cur[parts[len(parts)-1]] = v
	return out
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := map[string]any{}
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = deepCopy(e)
		}
		return s
	}
	return v
}

const certPEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

// Hostile and malformed objects are refused by the real API server's
// OpenAPI and CEL validation, each with a message naming the field and
// the fix; nothing of them is stored.
func TestCRDValidation(t *testing.T) {
	s := kubetest.Need(t)
	admin := installDeploy(t, s)
	ctx := context.Background()
	ovs := admin.Resource(OverlaysGVR).Namespace("sluice-system")
	hosts := admin.Resource(HostsGVR).Namespace("sluice-system")
	if _, err := ovs.Create(ctx, obj("Overlay", "prod", validOverlay()), metav1.CreateOptions{}); err != nil {
		t.Fatalf("valid overlay refused: %v", err)
	}
	got, _ := ovs.Get(ctx, "prod", metav1.GetOptions{})
	if p, _, _ := unstructured.NestedString(got.Object, "spec", "deletionPolicy"); p != "Orphan" {
		t.Errorf("deletionPolicy default %q, want Orphan", p)
	}
	if _, err := hosts.Create(ctx, obj("Host", "hv-a", set(validHost(), "certificate", certPEM)), metav1.CreateOptions{}); err != nil {
		t.Fatalf("valid host refused: %v", err)
	}
	many := func(n int, f func(i int) any) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	seg := func(name string, vni int64) any { return map[string]any{"name": name, "vni": vni} }
	cases := []struct {
		name, kind string
		spec       map[string]any
		want       string
	}{
		{"manual keys", "Overlay", set(validOverlay(), "keying", map[string]any{"mode": "manual"}), "manual keys are a two-host, file-only feature"},
		{"conflicting VNIs", "Overlay", set(validOverlay(), "segments", []any{seg("a", 100), seg("b", 100)}), "two segments use the same vni"},
		{"VNI out of range", "Overlay", set(validOverlay(), "segments", []any{seg("a", 1<<24)}), "spec.segments[0].vni"},
		{"segment name too long for a device", "Overlay", set(validOverlay(), "segments", []any{seg("averylongsegmentname", 7)}), "spec.segments[0].name"},
		{"unknown offload", "Overlay", set(validOverlay(), "offload", "packet-please"), "spec.offload"},
		{"fixed MTU without value", "Overlay", set(validOverlay(), "mtu", map[string]any{"policy": "fixed"}), "mtu: policy fixed needs mtu.value"},
		{"huge: 65 segments", "Overlay", set(validOverlay(), "segments", many(65, func(i int) any { return seg(fmt.Sprintf("s%d", i), int64(i+1)) })), "must have at most 64 items"},
		{"vtep is a CIDR", "Host", set(validHost(), "vtep", "10.99.0.1/32"), "vtep: not an IP address"},
		{"vtep not canonical", "Host", set(validHost(), "vtep", "010.99.0.1"), "vtep: not an IP address"},
		{"vtep multicast", "Host", set(validHost(), "vtep", "239.1.1.1"), "vtep: must be a unicast address"},
		{"invalid underlay CIDR", "Host", set(validHost(), "underlay.address", "192.0.2.300/24"), "underlay.address: not an address with a prefix length"},
		{"underlay without prefix", "Host", set(validHost(), "underlay.address", "192.0.2.1"), "underlay.address: not an address with a prefix length"},
		{"vtep in the underlay subnet", "Host", set(validHost(), "vtep", "192.0.2.9"), "vtep must not be in the underlay subnet"},
		{"mixed families", "Host", set(validHost(), "vtep", "2001:db8::1"), "same family"},
		{"private key in the API", "Host", set(validHost(), "certificate", certPEM+"-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"), "the private key never leaves its host"},
		{"huge certificate", "Host", set(validHost(), "certificate", certPEM+strings.Repeat("A", 64<<10)), "spec.certificate"},
		{"huge capabilities", "Host", set(validHost(), "capabilities", map[string]any{"offload": many(50, func(int) any { return "packet" })}), "spec.capabilities.offload"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ovs
			if c.kind == "Host" {
				r = hosts
			}
			name := fmt.Sprintf("hostile-%d", i)
			_, err := r.Create(ctx, obj(c.kind, name, c.spec), metav1.CreateOptions{})
			if err == nil {
				t.Fatalf("accepted")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("refused, but the message does not say %q:\n%v", c.want, err)
			}
			if _, err := r.Get(ctx, name, metav1.GetOptions{}); err == nil {
				t.Fatal("stored anyway")
			}
		})
	}
	// The DaemonSet manifest is one the API server accepts.
	ds, err := kubetest.ReadManifests("../../deploy/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := kubetest.Apply(ctx, admin, ds); err != nil {
		t.Errorf("deploy/daemonset.yaml: %v", err)
	}
	// A 3 MB object never reaches etcd (the API server's request limit).
	big := set(validHost(), "certificate", certPEM+strings.Repeat("A", 3<<20))
	if _, err := hosts.Create(ctx, obj("Host", "hostile-big", big), metav1.CreateOptions{}); err == nil {
		t.Fatal("3 MB host accepted")
	}
}

// An agent writes only its own Host object (RBAC + the admission policy
// of deploy/rbac.yaml), reads overlays, and can write neither overlays
// nor anything secret.
func TestRBACNodeScoped(t *testing.T) {
	s := kubetest.Need(t, kubetest.User{Name: "sluice:host:hv-a", Groups: []string{"sluice:agents"}},
		kubetest.User{Name: "sluice:host:hv-b", Groups: []string{"sluice:agents"}})
	admin := installDeploy(t, s)
	ctx := context.Background()
	a, err := dynamic.NewForConfig(s.Config("sluice:host:hv-a"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := dynamic.NewForConfig(s.Config("sluice:host:hv-b"))
	ha, hb := a.Resource(HostsGVR).Namespace("sluice-system"), b.Resource(HostsGVR).Namespace("sluice-system")
	// The admission policy may take a moment to be enforced after its
	// creation: retry the first write that must be refused.
	if _, err := hb.Create(ctx, obj("Host", "hv-b", set(validHost(), "vtep", "10.99.0.2")), metav1.CreateOptions{}); err != nil {
		t.Fatalf("hv-b registering itself: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = ha.Create(ctx, obj("Host", "hv-z", validHost()), metav1.CreateOptions{})
		if err != nil || time.Now().After(deadline) {
			break
		}
		_ = admin.Resource(HostsGVR).Namespace("sluice-system").Delete(ctx, "hv-z", metav1.DeleteOptions{})
		time.Sleep(300 * time.Millisecond)
	}
	if err == nil || !strings.Contains(err.Error(), "an agent writes only its own Host object") {
		t.Fatalf("hv-a creating hv-z: %v", err)
	}
	if _, err := ha.Create(ctx, obj("Host", "hv-a", validHost()), metav1.CreateOptions{}); err != nil {
		t.Fatalf("hv-a registering itself: %v", err)
	}
	// Claiming hv-b's object: update, status, delete.
	cur, err := ha.Get(ctx, "hv-b", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("hv-a reading hosts: %v", err)
	}
	_ = unstructured.SetNestedField(cur.Object, "10.99.0.1", "spec", "vtep")
	if _, err := ha.Update(ctx, cur, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "may not UPDATE Host hv-b") {
		t.Errorf("hv-a updating hv-b: %v", err)
	}
	cur, _ = ha.Get(ctx, "hv-b", metav1.GetOptions{})
	_ = unstructured.SetNestedField(cur.Object, map[string]any{"errors": []any{"forged"}}, "status")
	if _, err := ha.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err == nil {
		t.Error("hv-a wrote hv-b's status")
	}
	if err := ha.Delete(ctx, "hv-b", metav1.DeleteOptions{}); err == nil {
		t.Error("hv-a deleted hv-b")
	}
	// Its own status: allowed.
	own, _ := ha.Get(ctx, "hv-a", metav1.GetOptions{})
	_ = unstructured.SetNestedField(own.Object, map[string]any{"errors": []any{"none"}}, "status")
	if _, err := ha.UpdateStatus(ctx, own, metav1.UpdateOptions{}); err != nil {
		t.Errorf("hv-a writing its own status: %v", err)
	}
	// Overlays: read only. Secrets: nothing.
	if _, err := a.Resource(OverlaysGVR).Namespace("sluice-system").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("hv-a listing overlays: %v", err)
	}
	if _, err := a.Resource(OverlaysGVR).Namespace("sluice-system").Create(ctx, obj("Overlay", "mine", validOverlay()), metav1.CreateOptions{}); err == nil {
		t.Error("hv-a created an overlay")
	}
	if _, err := a.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Namespace("sluice-system").List(ctx, metav1.ListOptions{}); err == nil {
		t.Error("hv-a listed secrets")
	}
}
