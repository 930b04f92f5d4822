// SPDX-License-Identifier: Apache-2.0

package config

import (
	"os"
	"reflect"
	"testing"
)

// clearLines zeroes File and every Line field: what a host file does not
// hold as a value.
func clearLines(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			clearLines(v.Elem())
		}
	case reflect.Slice:
		for i := range v.Len() {
			clearLines(v.Index(i))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			switch f := v.Type().Field(i); {
			case f.Name == "File" || f.Name == "Line" || f.Name == "KeysLine":
				v.Field(i).SetZero()
			case f.IsExported():
				clearLines(v.Field(i))
			}
		}
	}
}

// MarshalHost must write back every value ParseHost read: the shipped
// example, written and parsed again, is the same Host.
func TestMarshalHostRoundTrip(t *testing.T) {
	path := "../../contrib/examples/host.yaml"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := ParseHost(b, path)
	if err != nil {
		t.Fatal(err)
	}
	out, err := MarshalHost(h)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := ParseHost(out, path)
	if err != nil {
		t.Fatalf("the written file does not parse: %v\n%s", err, out)
	}
	clearLines(reflect.ValueOf(h))
	clearLines(reflect.ValueOf(h2))
	if !reflect.DeepEqual(h, h2) {
		t.Errorf("written and parsed again, the host differs:\n%+v\n%+v\nfile:\n%s", h, h2, out)
	}
}
