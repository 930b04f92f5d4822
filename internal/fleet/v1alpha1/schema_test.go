// SPDX-License-Identifier: Apache-2.0

package v1alpha1_test

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.yaml.in/yaml/v3"

	"sluice/internal/fleet/v1alpha1"
)

// The API is declared twice: the CRDs in deploy/crds, which the API server
// validates with, and the Go types here, which the agent decodes into.
// This guard walks both together so they cannot drift: every property has
// a field of the matching JSON type and every field a property, a required
// property is never omitempty in Go, and the enums the Go code names are
// the schema's.

// schemaOf reads the v1alpha1 openAPIV3Schema of deploy/crds/file.
func schemaOf(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../../../deploy/crds/" + file)
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema map[string]any `yaml:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name == v1alpha1.Version {
			return v.Schema.OpenAPIV3Schema
		}
	}
	t.Fatalf("%s: no version %s", file, v1alpha1.Version)
	return nil
}

// jsonFields lists a struct's JSON fields: name -> (field, omitempty).
// Inline fields (TypeMeta) are left out: apiVersion and kind are the API
// server's.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = f
	}
	return out
}

var timeType = reflect.TypeFor[metav1.Time]()

// compare walks Go type typ and schema s at path, and returns every
// difference.
func compare(path string, typ reflect.Type, s map[string]any) []string {
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want, _ := s["type"].(string)
	var got string
	switch {
	case typ == timeType:
		got = "string"
	case typ.Kind() == reflect.String:
		got = "string"
	case typ.Kind() == reflect.Bool:
		got = "boolean"
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Uint64:
		got = "integer"
	case typ.Kind() == reflect.Slice:
		got = "array"
	case typ.Kind() == reflect.Struct, typ.Kind() == reflect.Map:
		got = "object"
	}
	if got != want {
		return []string{fmt.Sprintf("%s: Go %s is JSON %q, the CRD says %q", path, typ, got, want)}
	}
	var diffs []string
	switch {
	case typ.Kind() == reflect.Slice:
		items, _ := s["items"].(map[string]any)
		diffs = compare(path+"[]", typ.Elem(), items)
	case typ.Kind() == reflect.Map:
		vals, _ := s["additionalProperties"].(map[string]any)
		diffs = compare(path+"{}", typ.Elem(), vals)
	case typ.Kind() == reflect.Struct && typ != timeType:
		props, _ := s["properties"].(map[string]any)
		fields := jsonFields(typ)
		for _, name := range sortedKeys(props) {
			if path == "" && (name == "apiVersion" || name == "kind" || name == "metadata") {
				continue // TypeMeta and ObjectMeta: the API server's
			}
			f, ok := fields[name]
			if !ok {
				diffs = append(diffs, fmt.Sprintf("%s.%s: in the CRD, no field of %s has json:%q", path, name, typ, name))
				continue
			}
			sub, _ := props[name].(map[string]any)
			diffs = append(diffs, compare(path+"."+name, f.Type, sub)...)
		}
		for _, name := range sortedKeys(fields) {
			if _, ok := props[name]; !ok && !(path == "" && name == "metadata") {
				diffs = append(diffs, fmt.Sprintf("%s.%s: field %s.%s is not in the CRD", path, name, typ, fields[name].Name))
			}
		}
		req, _ := s["required"].([]any)
		for _, r := range req {
			if f, ok := fields[fmt.Sprint(r)]; ok && strings.Contains(f.Tag.Get("json"), ",omitempty") {
				diffs = append(diffs, fmt.Sprintf("%s.%s: required in the CRD but omitempty in Go: the agent could write an object the API server refuses", path, r))
			}
		}
	}
	return diffs
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// at follows properties down a dotted path.
func at(t *testing.T, s map[string]any, path string) map[string]any {
	t.Helper()
	for _, p := range strings.Split(path, ".") {
		props, _ := s["properties"].(map[string]any)
		s, _ = props[p].(map[string]any)
		if s == nil {
			t.Fatalf("the CRD has no %s", path)
		}
	}
	return s
}

func enumOf(s map[string]any) []string {
	var out []string
	for _, v := range s["enum"].([]any) {
		out = append(out, fmt.Sprint(v))
	}
	return out
}

func TestTypesMatchCRDs(t *testing.T) {
	for _, tc := range []struct {
		file string
		typ  reflect.Type
	}{
		{"fleet.sluice.dev_overlays.yaml", reflect.TypeFor[v1alpha1.Overlay]()},
		{"fleet.sluice.dev_hosts.yaml", reflect.TypeFor[v1alpha1.Host]()},
	} {
		for _, d := range compare("", tc.typ, schemaOf(t, tc.file)) {
			t.Errorf("%s: %s", tc.file, d)
		}
	}
}

func TestEnumsMatchCRDs(t *testing.T) {
	ov := schemaOf(t, "fleet.sluice.dev_overlays.yaml")
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"spec.offload", []string{v1alpha1.OffloadRequirePacket, v1alpha1.OffloadPreferPacket, v1alpha1.OffloadCrypto, v1alpha1.OffloadNone}},
		{"spec.deletionPolicy", []string{v1alpha1.DeletionOrphan, v1alpha1.DeletionTeardown}},
	} {
		got := enumOf(at(t, ov, tc.path))
		if !slices.Equal(got, tc.want) {
			t.Errorf("overlay %s: the CRD's enum is %q, the Go constants %q", tc.path, got, tc.want)
		}
	}
	host := schemaOf(t, "fleet.sluice.dev_hosts.yaml")
	want := []string{v1alpha1.RolloutDone, v1alpha1.RolloutWaiting, v1alpha1.RolloutProgressing, v1alpha1.RolloutFailed}
	if got := enumOf(at(t, host, "status.rollout.state")); !slices.Equal(got, want) {
		t.Errorf("host status.rollout.state: the CRD's enum is %q, the Go constants %q", got, want)
	}
}
