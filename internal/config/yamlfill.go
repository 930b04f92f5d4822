// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"reflect"
)

// fill copies a decoded file struct into the config type the rest of
// sluice uses (gatewayFile into Gateway, hostFile into Host ...): fields
// convert by name, one to one, so a key stays declared once, on the file
// struct. A destination field named Line gets the line of the entry or
// section it belongs to (it); destination fields the source lacks (File,
// KeyLines ...) are left to the caller, and so are source fields the
// destination lacks.
func (p *parser) fill(dst, src reflect.Value, it item) {
	switch {
	case src.Type().ConvertibleTo(dst.Type()) && src.Kind() != reflect.Slice && src.Kind() != reflect.Pointer:
		dst.Set(src.Convert(dst.Type()))
	case src.Kind() == reflect.Pointer && dst.Kind() == reflect.Pointer:
		if !src.IsNil() {
			dst.Set(reflect.New(dst.Type().Elem()))
			p.fill(dst.Elem(), src.Elem(), it)
		}
	case src.Kind() == reflect.Slice && dst.Kind() == reflect.Slice:
		// Entries are decoded in the order recorded (p.items); fewer when
		// the decode was cut short.
		its := p.items[it.path]
		n := min(src.Len(), len(its))
		if n == 0 {
			return
		}
		dst.Set(reflect.MakeSlice(dst.Type(), n, n))
		for i := range n {
			p.fill(dst.Index(i), src.Index(i), its[i])
		}
	case src.Kind() == reflect.Struct && dst.Kind() == reflect.Struct:
		st := src.Type()
		for i := range st.NumField() {
			f := st.Field(i)
			d := dst.FieldByName(f.Name)
			if !d.IsValid() {
				continue
			}
			var at item
			if k := f.Type.Kind(); k == reflect.Struct || k == reflect.Pointer || k == reflect.Slice {
				// Only these hold a Line or list entries to place.
				key, _ := keyName(f)
				at.path = joinPath(it.path, key)
				at.line = p.lines[at.path]
			}
			p.fill(d, src.Field(i), at)
		}
		if l := dst.FieldByName("Line"); l.IsValid() && l.Kind() == reflect.Int && !src.FieldByName("Line").IsValid() {
			l.SetInt(int64(it.line))
		}
	default:
		panic(fmt.Sprintf("config: cannot fill %s (%s) from %s", it.path, dst.Type(), src.Type()))
	}
}
