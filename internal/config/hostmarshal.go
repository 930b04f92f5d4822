// SPDX-License-Identifier: Apache-2.0

package config

import (
	"bytes"
	"fmt"
	"reflect"

	"go.yaml.in/yaml/v3"

	"sluice/internal/yamldoc"
)

// MarshalHost writes h as a host file: the keys are hostFile's, the one
// declaration ParseHost reads, so a program that builds a Host (the fleet
// agent) never spells a key itself. Fields left at their zero value are
// not written, and parsing gives them their defaults; File and the Line
// fields, which the file does not hold, are ignored.
func MarshalHost(h *Host) ([]byte, error) {
	n, err := marshalNode(reflect.ValueOf(*h), reflect.TypeFor[hostFile]())
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	e := yaml.NewEncoder(&b)
	e.SetIndent(2) // as docs/overlay.md writes host files
	if err := e.Encode(n); err != nil {
		return nil, err
	}
	return b.Bytes(), e.Close()
}

// marshalNode is fill run backwards: v (a config value) written with the
// keys of file type t.
func marshalNode(v reflect.Value, t reflect.Type) (*yaml.Node, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	switch {
	case t.Kind() == reflect.Slice && v.Kind() == reflect.Slice:
		seq := &yaml.Node{Kind: yaml.SequenceNode}
		for i := range v.Len() {
			e, err := marshalNode(v.Index(i), t.Elem())
			if err != nil {
				return nil, err
			}
			seq.Content = append(seq.Content, e)
		}
		return seq, nil
	case t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(yamldoc.UnmarshalerType):
		m := &yaml.Node{Kind: yaml.MappingNode}
		for i := range t.NumField() {
			f := t.Field(i)
			key, ok := yamldoc.KeyName(f)
			fv := v.FieldByName(f.Name)
			if !ok || !fv.IsValid() || fv.IsZero() {
				continue
			}
			val, err := marshalNode(fv, f.Type)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, val)
		}
		return m, nil
	}
	// A leaf: yaml writes addresses and prefixes as their text
	// (MarshalText), durations as 1h0m0s, the rest (names, enums, numbers,
	// flags) as themselves.
	var n yaml.Node
	if err := n.Encode(v.Interface()); err != nil {
		return nil, err
	}
	return &n, nil
}
