// SPDX-License-Identifier: Apache-2.0

package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	"sluice/internal/fileread"
	"sluice/internal/fleet/v1alpha1"
)

// kinds maps the kinds deploy/ uses to their resources, so manifests can
// be applied without a discovery round trip (and without kubectl).
var kinds = map[string]struct {
	gvr        schema.GroupVersionResource
	namespaced bool
}{
	"Namespace":                        {schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, false},
	"ServiceAccount":                   {schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, true},
	"CustomResourceDefinition":         {schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}, false},
	"ClusterRole":                      {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, false},
	"ClusterRoleBinding":               {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, false},
	"Role":                             {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, true},
	"RoleBinding":                      {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, true},
	"ValidatingAdmissionPolicy":        {schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}, false},
	"ValidatingAdmissionPolicyBinding": {schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}, false},
	"DaemonSet":                        {schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, true},
	"Overlay":                          {v1alpha1.OverlaysResource, true},
	"Host":                             {v1alpha1.HostsResource, true},
}

// ReadManifests parses the YAML documents of the files.
func ReadManifests(paths ...string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, p := range paths {
		b, err := fileread.Read(p, fileread.ConfigLimit)
		if err != nil {
			return nil, err
		}
		d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var m map[string]any
			if err := d.Decode(&m); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			if len(m) == 0 {
				continue
			}
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
	return out, nil
}

// Apply creates each object, or updates it when it exists.
func Apply(ctx context.Context, c dynamic.Interface, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		k, ok := kinds[o.GetKind()]
		if !ok {
			return fmt.Errorf("%s %s: kind not known to sluice's manifest applier", o.GetKind(), o.GetName())
		}
		var r dynamic.ResourceInterface = c.Resource(k.gvr)
		if k.namespaced {
			r = c.Resource(k.gvr).Namespace(o.GetNamespace())
		}
		_, err := r.Create(ctx, o, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cur, gerr := r.Get(ctx, o.GetName(), metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			o.SetResourceVersion(cur.GetResourceVersion())
			_, err = r.Update(ctx, o, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}
