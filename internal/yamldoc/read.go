// SPDX-License-Identifier: Apache-2.0

package yamldoc

import (
	"reflect"

	"go.yaml.in/yaml/v3"
)

// Read decodes data, the whole file, into file (a pointer to its file
// struct) and fills out (a pointer to the type the rest of sluice uses)
// from it; needs says what the file needs at least (for an empty file)
// and keys names some of its keys. It returns the root mapping, or nil
// when there is none (p.Result says why). The caller then runs the
// checks that combine fields, and returns p.Result().
func (p *Parser) Read(data []byte, needs, keys string, file, out any) *yaml.Node {
	root := p.Document(data, needs, keys)
	if root == nil {
		return nil
	}
	p.Decode(root, file)
	p.Fill(reflect.ValueOf(out).Elem(), reflect.ValueOf(file).Elem(), Item{Line: root.Line})
	return root
}
