// SPDX-License-Identifier: Apache-2.0

package config

import (
	"reflect"
	"testing"

	"sluice/internal/yamldoc"
)

// fill copies by field name and skips a file field the config type lacks
// (for the few the parser copies itself): a key added to a file struct
// but not to the config type would parse, and be dropped. This walks the
// types, so a key is checked whether or not a test file sets it.
func TestFileStructsFillEveryKey(t *testing.T) {
	copiedByHand := map[string]bool{"gatewayFile.DaemonCPU": true, "gatewayFile.DaemonPriority": true, "gatewayFile.LockMemory": true}
	var check func(src, dst reflect.Type)
	check = func(src, dst reflect.Type) {
		for src.Kind() == reflect.Pointer || src.Kind() == reflect.Slice {
			src, dst = src.Elem(), dst.Elem()
		}
		if src.Kind() != reflect.Struct || reflect.PointerTo(src).Implements(yamldoc.UnmarshalerType) {
			if !src.ConvertibleTo(dst) {
				t.Errorf("%s does not convert to %s", src, dst)
			}
			return
		}
		for i := range src.NumField() {
			f := src.Field(i)
			if _, ok := yamldoc.KeyName(f); !ok {
				continue
			}
			d, ok := dst.FieldByName(f.Name)
			if !ok {
				if !copiedByHand[src.Name()+"."+f.Name] {
					t.Errorf("%s.%s (key %q) has no field %s in %s: the key would be dropped", src.Name(), f.Name, f.Tag.Get("yaml"), f.Name, dst)
				}
				continue
			}
			check(f.Type, d.Type)
		}
	}
	check(reflect.TypeFor[gatewayFile](), reflect.TypeFor[Gateway]())
	check(reflect.TypeFor[hostFile](), reflect.TypeFor[Host]())
}
