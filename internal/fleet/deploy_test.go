// SPDX-License-Identifier: Apache-2.0

package fleet_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"sluice/internal/fleet/kubetest"
)

// deploy/daemonset.yaml as an operator applies it (kubectl apply
// --server-side) to a real API server whose Pod Security default is
// baseline: the server accepts it, dry-run and for real; a pod of its
// template is admitted in its namespace (labelled privileged by rbac.yaml)
// and would be refused in any other; it selects only the nodes labelled
// sluice.dev/agent=true.
func TestDeployDaemonSet(t *testing.T) {
	s := kubetest.Need(t)
	admin := installDeploy(t, s)
	ctx := context.Background()
	objs, err := kubetest.ReadManifests("../../deploy/daemonset.yaml")
	if err != nil || len(objs) != 1 || objs[0].GetKind() != "DaemonSet" {
		t.Fatalf("deploy/daemonset.yaml: %v (%d objects)", err, len(objs))
	}
	ds := objs[0]
	dsAPI := admin.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}).Namespace(ds.GetNamespace())
	for _, dry := range [][]string{{metav1.DryRunAll}, nil} {
		if _, err := dsAPI.Apply(ctx, ds.GetName(), ds, metav1.ApplyOptions{FieldManager: "sluice-deploy", Force: true, DryRun: dry}); err != nil {
			t.Fatalf("server-side apply (dry-run %v) of the DaemonSet: %v", dry, err)
		}
	}

	// Its pod, as the DaemonSet controller would make it for a node.
	var tmpl corev1.PodTemplateSpec
	m, _, _ := unstructured.NestedMap(ds.Object, "spec", "template")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &tmpl); err != nil {
		t.Fatal(err)
	}
	kc := kubernetes.NewForConfigOrDie(s.Config("admin"))
	pod := func(ns string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
		p.Name, p.Namespace, p.Spec.NodeName = "sluice-agent-hv-a", ns, "hv-a"
		return p
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	if _, err := kc.CoreV1().Pods(ds.GetNamespace()).Create(ctx, pod(ds.GetNamespace()), dry); err != nil {
		t.Errorf("the DaemonSet's pod in %s: %v", ds.GetNamespace(), err)
	}
	// The same pod where nothing says privileged: refused, so the label
	// is what admits it (and this server does enforce Pod Security).
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().ServiceAccounts("plain").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sluice-agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Pods("plain").Create(ctx, pod("plain"), dry); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Errorf("the privileged pod in a baseline namespace: %v", err)
	}

	// Nodes: it runs only where the administrator opted in.
	for name, lbl := range map[string]map[string]string{
		"worker": {"kubernetes.io/os": "linux"},
		"hv-a":   {"kubernetes.io/os": "linux", "sluice.dev/agent": "true"},
	} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}}
		if _, err := kc.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if len(tmpl.Spec.NodeSelector) == 0 {
		t.Fatal("the DaemonSet has no nodeSelector: it would run on every node")
	}
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(tmpl.Spec.NodeSelector).String()})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 1 || nodes.Items[0].Name != "hv-a" {
		var got []string
		for _, n := range nodes.Items {
			got = append(got, n.Name)
		}
		t.Errorf("the DaemonSet's nodeSelector %v selects %v, want [hv-a]", tmpl.Spec.NodeSelector, got)
	}
}
