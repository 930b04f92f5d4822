// SPDX-License-Identifier: Apache-2.0

package kubetest

import (
	"context"
	"fmt"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// PodAgent returns a client configuration acting as the ServiceAccount sa
// of namespace ns from inside a pod on node: it makes the Node (if
// missing) and a Pod bound to it, then asks the TokenRequest API for a
// token bound to that Pod, as the kubelet does for a DaemonSet's pod. Such
// a token carries the user extra authentication.kubernetes.io/node-name,
// which the admission policy of deploy/rbac.yaml reads. Nothing runs in
// the pod: this server has no kubelet, only the API objects exist.
func (s *Server) PodAgent(t testing.TB, ns, sa, node string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	kc, err := kubernetes.NewForConfig(s.Config("admin"))
	if err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if _, err := kc.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("node %s: %v", node, err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s", sa, node), Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "agent", Image: "sluice:test"}}}}
	pod, err = kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("pod of %s/%s on %s: %v", ns, sa, node, err)
	}
	exp := int64(3600)
	tr, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of %s/%s bound to pod %s: %v", ns, sa, pod.Name, err)
	}
	cfg := &rest.Config{Host: s.URL, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	// The token must carry the node: without it the test would prove
	// nothing about the DaemonSet's branch of the policy.
	who, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("whoami with the pod's token: %v", err)
	}
	if got := who.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != node {
		t.Fatalf("the pod-bound token of %s carries node-name %v, want [%s] (user %s)", sa, got, node, who.Status.UserInfo.Username)
	}
	return cfg
}
