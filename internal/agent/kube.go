// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"sluice/internal/fleet/v1alpha1"
)

// RESTConfig is the client configuration: the kubeconfig file when given
// (an agent on a host that is not a node), else the pod's in-cluster
// ServiceAccount.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		return nil, fmt.Errorf("--kubeconfig is needed outside a pod (or run from a host file: sluice agent -f host.yaml)")
	}
	return rest.InClusterConfig()
}

// kubeSource watches the Overlays and Hosts of one namespace. The
// informers' caches are the agent's view: when the API server goes away,
// the view stays as it was (and so does the data path) while client-go
// retries the watch.
type kubeSource struct {
	dyn      dynamic.Interface
	ns       string
	overlays cache.SharedIndexInformer
	hosts    cache.SharedIndexInformer
	factory  dynamicinformer.DynamicSharedInformerFactory
	// events counts watch events received (the scale benchmark's watch
	// traffic).
	events atomic.Int64
	apiUp  atomic.Bool
}

// stripStatus keeps only what rendering needs in the cache: status and
// managedFields of 1,000 hosts are most of their size. Of another host's
// status an agent reads only status.rollout (a staged rollout's turns,
// rollout.go: about 100 bytes).
func stripStatus(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		roll, has, _ := unstructured.NestedMap(u.Object, "status", "rollout")
		unstructured.RemoveNestedField(u.Object, "status")
		if has {
			_ = unstructured.SetNestedMap(u.Object, roll, "status", "rollout")
		}
		u.SetManagedFields(nil)
		delete(u.GetAnnotations(), "kubectl.kubernetes.io/last-applied-configuration")
	}
	return obj, nil
}

func newKubeSource(cfg *rest.Config, ns string, resync time.Duration, trigger func()) (*kubeSource, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	k := &kubeSource{dyn: dyn, ns: ns}
	k.factory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, resync, ns, nil)
	k.overlays = k.factory.ForResource(v1alpha1.OverlaysResource).Informer()
	k.hosts = k.factory.ForResource(v1alpha1.HostsResource).Informer()
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { k.events.Add(1); trigger() },
		UpdateFunc: func(any, any) { k.events.Add(1); trigger() },
		DeleteFunc: func(any) { k.events.Add(1); trigger() },
	}
	for _, inf := range []cache.SharedIndexInformer{k.overlays, k.hosts} {
		if err := inf.SetTransform(stripStatus); err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			return nil, err
		}
		_ = inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
			k.apiUp.Store(false)
		})
	}
	return k, nil
}

func (k *kubeSource) start(ctx context.Context) bool {
	k.factory.Start(ctx.Done())
	ok := cache.WaitForCacheSync(ctx.Done(), k.overlays.HasSynced, k.hosts.HasSynced)
	if ok {
		k.apiUp.Store(true)
	}
	return ok
}

func convert[T any](objs []any) []T {
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var t T
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &t); err != nil {
			continue // the CRD's schema makes this unreachable; skip
		}
		out = append(out, t)
	}
	return out
}

func (k *kubeSource) snapshot() ([]v1alpha1.Overlay, []v1alpha1.Host) {
	return convert[v1alpha1.Overlay](k.overlays.GetStore().List()), convert[v1alpha1.Host](k.hosts.GetStore().List())
}

func (k *kubeSource) hostsClient() dynamic.ResourceInterface {
	return k.dyn.Resource(v1alpha1.HostsResource).Namespace(k.ns)
}

// register creates this host's object, without labels (it is a member of
// nothing until an administrator labels it), or publishes the certificate
// and capabilities of an existing one. The addresses of an existing Host
// are the administrator's: an agent offering others says so and keeps
// the object's (the admission policy would refuse the write anyway).
func (k *kubeSource) register(ctx context.Context, name string, offer v1alpha1.HostSpec, logf func(string, ...any)) error {
	c := k.hostsClient()
	cur, err := c.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		h := v1alpha1.Host{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.Group + "/" + v1alpha1.Version, Kind: "Host"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns}, Spec: offer}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&h)
		if err != nil {
			return err
		}
		delete(m, "status")
		_, err = c.Create(ctx, &unstructured.Unstructured{Object: m}, metav1.CreateOptions{FieldManager: "sluice-agent"})
		return err
	}
	if err != nil {
		return err
	}
	var have v1alpha1.Host
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(cur.Object, &have); err != nil {
		return err
	}
	if have.Spec.VTEP != offer.VTEP || !reflect.DeepEqual(have.Spec.Underlay, offer.Underlay) {
		logf("Host %s has vtep %s underlay %+v; this agent was given vtep %s underlay %+v: the Host's addresses are the administrator's, the agent uses the object's (kubectl -n %s edit host %s to change them)",
			name, have.Spec.VTEP, have.Spec.Underlay, offer.VTEP, offer.Underlay, k.ns, name)
	}
	spec := have.Spec
	if offer.Certificate != "" {
		spec.Certificate = offer.Certificate
	}
	if !reflect.DeepEqual(offer.Capabilities, v1alpha1.Capabilities{}) {
		spec.Capabilities = offer.Capabilities
	}
	if reflect.DeepEqual(have.Spec, spec) {
		return nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	if err != nil {
		return err
	}
	cur.Object["spec"] = m
	_, err = c.Update(ctx, cur, metav1.UpdateOptions{FieldManager: "sluice-agent"})
	return err
}

// writeStatus replaces the host's status, unless it is what was written
// last (a status write is a watch event for every agent: at 1,000 hosts
// unchanged writes would be most of the traffic).
func (k *kubeSource) writeStatus(ctx context.Context, name string, st v1alpha1.HostStatus, last *[]byte) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if last != nil && string(b) == string(*last) {
		return nil
	}
	c := k.hostsClient()
	for try := 0; try < 3; try++ {
		cur, err := c.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		cur.Object["status"] = m
		_, err = c.UpdateStatus(ctx, cur, metav1.UpdateOptions{FieldManager: "sluice-agent"})
		if apierrors.IsConflict(err) {
			continue
		}
		if err == nil && last != nil {
			*last = b
		}
		return err
	}
	return fmt.Errorf("host %s status: conflicting updates", name)
}
