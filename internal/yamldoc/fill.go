// SPDX-License-Identifier: Apache-2.0

package yamldoc

import (
	"fmt"
	"reflect"
)

// Fill copies a decoded file struct into the type the rest of sluice
// uses (config's gatewayFile into Gateway, tune's tuneFile into Profile
// ...): fields
// convert by name, one to one, so a key stays declared once, on the file
// struct. A destination field named Line gets the line of the entry or
// section it belongs to (it); destination fields the source lacks (File,
// KeyLines ...) are left to the caller, and so are source fields the
// destination lacks.
func (p *Parser) Fill(dst, src reflect.Value, it Item) {
	switch {
	case src.Type().ConvertibleTo(dst.Type()) && src.Kind() != reflect.Slice && src.Kind() != reflect.Pointer:
		dst.Set(src.Convert(dst.Type()))
	case src.Kind() == reflect.Pointer && dst.Kind() == reflect.Pointer:
		if !src.IsNil() {
			dst.Set(reflect.New(dst.Type().Elem()))
			p.Fill(dst.Elem(), src.Elem(), it)
		}
	case src.Kind() == reflect.Slice && dst.Kind() == reflect.Slice:
		// Entries are decoded in the order recorded (p.Items); fewer when
		// the decode was cut short.
		its := p.Items[it.Path]
		n := min(src.Len(), len(its))
		if n == 0 {
			return
		}
		dst.Set(reflect.MakeSlice(dst.Type(), n, n))
		for i := range n {
			p.Fill(dst.Index(i), src.Index(i), its[i])
		}
	case src.Kind() == reflect.Map && dst.Kind() == reflect.Map:
		if src.IsNil() {
			return
		}
		dst.Set(reflect.MakeMapWithSize(dst.Type(), src.Len()))
		for e := src.MapRange(); e.Next(); {
			k := e.Key()
			at := Item{Path: KeyPath(it.Path, k.String())}
			at.Line = p.Lines[at.Path]
			v := reflect.New(dst.Type().Elem()).Elem()
			p.Fill(v, e.Value(), at)
			dst.SetMapIndex(k.Convert(dst.Type().Key()), v)
		}
	case src.Kind() == reflect.Struct && dst.Kind() == reflect.Struct:
		st := src.Type()
		for i := range st.NumField() {
			f := st.Field(i)
			d := dst.FieldByName(f.Name)
			if !d.IsValid() {
				continue
			}
			var at Item
			if k := f.Type.Kind(); k == reflect.Struct || k == reflect.Pointer || k == reflect.Slice || k == reflect.Map {
				// Only these hold a Line or entries to place.
				key, _ := KeyName(f)
				at.Path = joinPath(it.Path, key)
				at.Line = p.Lines[at.Path]
			}
			p.Fill(d, src.Field(i), at)
		}
		if l := dst.FieldByName("Line"); l.IsValid() && l.Kind() == reflect.Int && !src.FieldByName("Line").IsValid() {
			l.SetInt(int64(it.Line))
		}
	default:
		panic(fmt.Sprintf("yamldoc: cannot fill %s (%s) from %s", it.Path, dst.Type(), src.Type()))
	}
}

// ItemAt is the mapping at path (a key of the file), for messages.
func (p *Parser) ItemAt(path string) Item { return Item{Path: path, Line: p.Lines[path]} }

// ItemsOf is the entries of the list at path that were decoded (n of
// them: fewer than recorded when the decode was cut short).
func (p *Parser) ItemsOf(path string, n int) []Item {
	its := p.Items[path]
	return its[:min(n, len(its))]
}
