// SPDX-License-Identifier: Apache-2.0

package yamldoc

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// A file is decoded into its file struct (config's gatewayFile, tune's tuneFile ...):
// each key is declared once, as a field with a `yaml:"name"` tag (and
// `default:`, `what:` and `example:` tags: its fixed default, and how
// messages name its entries and keys), and each value is a leaf type
// whose UnmarshalYAML checks it (leaf.go).
// yaml.v3 decodes; before it, plain walks the node tree once, guided by
// the struct's tags, and hands yaml.v3 a tree it decodes the way sluice
// must. The walk stays because yaml.v3, on the tree as written:
//   - drops a whole mapping (the file, or a list entry) when a key repeats,
//     so the checks that combine fields would report keys as missing that
//     are there; the walk reports the repeat and keeps the first;
//   - fails on a mapping that merges itself (<<: *self), which sluice
//     takes as a no-op, and stops at the first bad merge value;
//   - drops null and mistyped list entries without a word, which would
//     shift every later entry's index in messages;
//   - has no budget for what aliases and merge keys expand to (its own
//     ratio check stops late on small files), and no notion of the key
//     path a message should name.
//
// Decoder.KnownFields(true) works only on the bytes as written, where the
// points above bite; the plain tree is decoded with Node.Decode, which has
// no KnownFields, so the walk refuses unknown keys itself, from the same
// tags, with "did you mean". The plain tree has merges expanded, no
// aliases, no null values, and only keys the struct declares; its leaves
// are copies whose Column holds their index in Parser.leaves, so an error
// from UnmarshalYAML is reported at its key's line and path. Fill
// (fill.go) then copies the file struct into the caller's type.

var UnmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// Decode walks root into a plain tree and decodes that into out (a
// pointer to a file struct), recording every problem.
func (p *Parser) Decode(root *yaml.Node, out any) {
	t := reflect.TypeOf(out).Elem()
	plain := p.plainMapping(root, "", t, "")
	if p.overBudg != nil {
		return
	}
	err := func() (err error) {
		// yaml.v3 is third-party code: whatever it does, the caller gets
		// an error, not a panic.
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%v", r)
			}
		}()
		return plain.Decode(out)
	}()
	var te *yaml.TypeError
	switch {
	case errors.As(err, &te):
		for _, s := range te.Errors {
			p.leafError(s)
		}
	case err != nil:
		p.Errorf(root.Line, "", "the YAML decoder failed on this input (%s); check the file's syntax", oneLine(err.Error()))
	}
}

var (
	leafErrRE     = regexp.MustCompile(`^line \d+: column (\d+): (.*)$`)
	typeErrLineRE = regexp.MustCompile(`^line (\d+): `)
)

// leafError records an error from a leaf's UnmarshalYAML at its key.
func (p *Parser) leafError(s string) {
	if m := leafErrRE.FindStringSubmatch(s); m != nil {
		if i, err := strconv.Atoi(m[1]); err == nil && i < len(p.leaves) {
			l := p.leaves[i]
			p.Errorf(l.Line, l.Path, "%s", markDefault(m[2], l.Def))
			return
		}
	}
	// Only a field without a leaf type gets here: a bug in the schema.
	line := 0
	if m := typeErrLineRE.FindStringSubmatch(s); m != nil {
		line, _ = strconv.Atoi(m[1])
	}
	p.Errorf(line, "", "%s", oneLine(s))
}

// markDefault marks def in msg's list of allowed values ("use one of a,
// b or c"): the default is the key's tag, so the enum types do not repeat
// it.
func markDefault(msg, def string) string {
	i := strings.Index(msg, "one of ")
	if def == "" || i < 0 {
		return msg
	}
	re := regexp.MustCompile(`(^|, | or )` + regexp.QuoteMeta(def) + `(,| or |$)`)
	head, list := msg[:i+len("one of ")], msg[i+len("one of "):]
	end := strings.IndexAny(list, ";")
	tail := ""
	if end >= 0 {
		list, tail = list[:end], list[end:]
	}
	if loc := re.FindStringSubmatchIndex(list); loc != nil {
		at := loc[3] + len(def) // after def
		list = list[:at] + " (default)" + list[at:]
	}
	return head + list + tail
}

// LeafErr is how a leaf's UnmarshalYAML reports a bad value: a
// *yaml.TypeError (yaml.v3 gathers those and goes on), positioned so that
// leafError finds the key.
func LeafErr(n *yaml.Node, format string, args ...any) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: column %d: ", n.Line, n.Column) + fmt.Sprintf(format, args...)}}
}

// plain returns the plain tree for value n (alias-resolved) of type t at
// path, whose key is on line and has tag; nil when there is nothing to
// decode. A key's what: and example: tags name its list entries and show
// its keys in messages.
func (p *Parser) plain(n *yaml.Node, path string, line int, t reflect.Type, tag reflect.StructTag) *yaml.Node {
	if isNull(n) {
		return nil
	}
	if reflect.PointerTo(t).Implements(UnmarshalerType) {
		c := *n
		c.Column = len(p.leaves)
		p.leaves = append(p.leaves, Item{Path: path, Line: line, Def: tag.Get("default")})
		return &c
	}
	switch t.Kind() {
	case reflect.Pointer:
		return p.plain(n, path, line, t.Elem(), tag)
	case reflect.Struct, reflect.Map:
		if n.Kind != yaml.MappingNode {
			p.Errorf(line, path, "want keys under %s (such as %s), got %s", lastKey(path), tag.Get("example"), KindName(n))
			return nil
		}
		return p.plainMapping(n, path, t, tag.Get("example"))
	case reflect.Slice:
		return p.plainSequence(n, path, line, t, tag)
	}
	panic(fmt.Sprintf("yamldoc: %s (%s) has no UnmarshalYAML", path, t))
}

// suchAs is an example for a message, or nothing.
func suchAs(example string) string {
	if example == "" {
		return ""
	}
	return " (such as " + example + ")"
}

func lastKey(path string) string {
	return path[strings.LastIndex(path, ".")+1:]
}

// Shorthand is a struct that may be written as a single value, which
// stands for its key shorthand() (a remote VTEP as a bare address).
type Shorthand interface{ Shorthand() string }

// plainSequence keeps the entries of a list that can be decoded, and
// records them (p.Items) and how many were written (p.Counts). A single
// value stands for a list of one where the entries are values.
func (p *Parser) plainSequence(n *yaml.Node, path string, line int, t reflect.Type, tag reflect.StructTag) *yaml.Node {
	et := t.Elem()
	what, example := cmp.Or(tag.Get("what"), "item"), tag.Get("example")
	isLeaf := reflect.PointerTo(et).Implements(UnmarshalerType)
	isStruct := et.Kind() == reflect.Struct && !isLeaf
	short, _ := reflect.Zero(et).Interface().(Shorthand)
	out := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Line: n.Line}
	switch {
	case isLeaf && n.Kind == yaml.ScalarNode:
		p.Counts[path] = 1
		out.Content = []*yaml.Node{p.plain(n, path, line, et, "")}
		p.Items[path] = []Item{{Path: path, Line: line}}
		return out
	case n.Kind != yaml.SequenceNode && isStruct:
		p.Errorf(line, path, "want a list of %ss (lines starting with '- '), got %s", what, KindName(n))
		return nil
	case n.Kind != yaml.SequenceNode:
		p.Errorf(line, path, "want a list of %s, got %s", what, KindName(n))
		return nil
	}
	p.Counts[path] = len(n.Content)
	for i, c := range n.Content {
		if !p.spend(c.Line) {
			return out
		}
		ip := fmt.Sprintf("%s[%d]", path, i)
		v := deref(c)
		switch {
		case isNull(v):
			p.Errorf(c.Line, ip, "empty list item; remove the '-' or fill in the %s", what)
		case short != nil && v.Kind == yaml.ScalarNode:
			// The single value is reported at the entry, as written.
			k := short.Shorthand()
			out.Content = append(out.Content, &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: c.Line, Content: []*yaml.Node{
				{Kind: yaml.ScalarNode, Tag: "!!str", Value: k, Line: c.Line}, p.plain(v, ip, c.Line, KeysOf(et).fields[k].Type, "")}})
			p.Items[path] = append(p.Items[path], Item{Path: ip, Line: c.Line})
		case isStruct && v.Kind != yaml.MappingNode && short != nil:
			p.Errorf(c.Line, ip, "want %s (a single value, or keys such as - %s), got %s", article(what), example, KindName(v))
		case isStruct && v.Kind != yaml.MappingNode:
			p.Errorf(c.Line, ip, "want %s written as keys (such as - %s), got %s", article(what), example, KindName(v))
		default:
			if e := p.plain(v, ip, c.Line, et, ""); e != nil {
				out.Content = append(out.Content, e)
				p.Items[path] = append(p.Items[path], Item{Path: ip, Line: c.Line})
			}
		}
	}
	return out
}

// KeysOf returns the keys a struct declares, in field order, with their
// fields and defaults (cached: a lab file has a mapping per policy).
func KeysOf(t reflect.Type) *schemaKeys {
	if k, ok := schemaCache.Load(t); ok {
		return k.(*schemaKeys)
	}
	s := &schemaKeys{fields: map[string]reflect.StructField{}, defaults: map[string]*yaml.Node{}}
	for i := range t.NumField() {
		f := t.Field(i)
		name, ok := KeyName(f)
		if !ok {
			continue
		}
		s.Names = append(s.Names, name)
		s.fields[name] = f
		if d, ok := f.Tag.Lookup("default"); ok {
			var doc yaml.Node
			if err := yaml.Unmarshal([]byte(d), &doc); err != nil || len(doc.Content) != 1 {
				panic(fmt.Sprintf("yamldoc: %s.%s: bad default %q", t, f.Name, d))
			}
			s.defaults[name] = doc.Content[0]
		}
	}
	schemaCache.Store(t, s)
	return s
}

// schemaKeys is what a struct declares: a key's default (its `default:`
// tag, written as YAML) is decoded by the key's leaf type, like a value
// written in the file, wherever the key is absent or null.
type schemaKeys struct {
	Names    []string
	fields   map[string]reflect.StructField
	defaults map[string]*yaml.Node
	// elem is set for a map: every key is the file's to choose, and its
	// value is an elem; example shows one (the map field's example: tag).
	elem    reflect.Type
	example string
}

// field is the field that key name declares.
func (s *schemaKeys) field(name string) (reflect.StructField, bool) {
	if s.elem != nil {
		return reflect.StructField{Type: s.elem}, true
	}
	f, ok := s.fields[name]
	return f, ok
}

var schemaCache sync.Map // reflect.Type -> *schemaKeys

// KeyName is the key a struct field declares.
func KeyName(f reflect.StructField) (string, bool) {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name, name != "" && name != "-"
}

// plainMapping returns mapping m of struct or map type t with merge keys
// (<<: *anchor) expanded: keys written in m win over merged ones, and
// earlier merges over later ones, as YAML specifies. It records the line
// of every known key present (p.Lines) and which ones are not null
// (p.Given), and adds the default of each key that is not given. A map's
// example (its field's example: tag) shows an entry in messages.
func (p *Parser) plainMapping(m *yaml.Node, path string, t reflect.Type, example string) *yaml.Node {
	out := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: m.Line}
	var s *schemaKeys
	if t.Kind() == reflect.Map {
		s = &schemaKeys{elem: t.Elem(), example: example}
	} else {
		s = KeysOf(t)
	}
	p.collectKeys(m, path, s, out, map[string]bool{}, map[*yaml.Node]bool{m: true}, false, 0)
	for _, name := range s.Names {
		fp := KeyPath(path, name)
		if d := s.defaults[name]; d != nil && !p.Given[fp] {
			out.Content = append(out.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name, Line: m.Line}, p.plain(d, fp, m.Line, s.fields[name].Type, ""))
		}
	}
	return out
}

// collectKeys appends the keys of m (and of the mappings it merges) to out.
func (p *Parser) collectKeys(m *yaml.Node, path string, keys *schemaKeys, out *yaml.Node, done map[string]bool, visited map[*yaml.Node]bool, merged bool, depth int) {
	var merges []*yaml.Node
	here := map[string]int{} // keys written in this mapping -> line
	for i := 0; i+1 < len(m.Content); i += 2 {
		kn, vn := m.Content[i], m.Content[i+1]
		if !p.spend(kn.Line) {
			return
		}
		k := deref(kn)
		if k.Kind != yaml.ScalarNode {
			p.Errorf(kn.Line, path, "a key must be a plain word such as name, not %s", KindName(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, vn)
			continue
		}
		name := k.Value
		fp := KeyPath(path, name)
		if first, dup := here[name]; dup {
			if !merged {
				p.Errorf(kn.Line, fp, "set twice (first on line %d); keep one", first)
			}
			continue
		}
		here[name] = kn.Line
		f, known := keys.field(name)
		if !known {
			p.unknownKey(kn.Line, fp, name, keys.Names)
			continue
		}
		if done[name] {
			// Already set by the mapping that merges this one: it wins.
			continue
		}
		done[name] = true
		p.Lines[fp] = kn.Line
		v := deref(vn)
		if !isNull(v) {
			p.Given[fp] = true
		} else if keys.elem != nil {
			// A key the file chose means nothing without its value.
			p.Errorf(kn.Line, fp, "has no value; give it one%s, or remove the key", suchAs(keys.example))
			continue
		}
		if c := p.plain(v, fp, kn.Line, f.Type, f.Tag); c != nil {
			out.Content = append(out.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name, Line: kn.Line}, c)
		}
	}
	for _, mv := range merges {
		src := deref(mv)
		var list []*yaml.Node
		switch src.Kind {
		case yaml.MappingNode:
			list = []*yaml.Node{src}
		case yaml.SequenceNode:
			for _, c := range src.Content {
				list = append(list, deref(c))
			}
		default:
			p.Errorf(mv.Line, joinPath(path, "<<"), "a merge key takes a mapping or a list of mappings (such as <<: *defaults), not %s", KindName(src))
			continue
		}
		for _, s := range list {
			if !p.spend(mv.Line) {
				return
			}
			if s.Kind != yaml.MappingNode {
				p.Errorf(mv.Line, joinPath(path, "<<"), "a merge key takes mappings only (such as <<: *defaults), not %s", KindName(s))
				continue
			}
			if visited[s] {
				continue
			}
			if depth >= maxMergeDepth {
				p.Errorf(mv.Line, joinPath(path, "<<"), "merge keys nest deeper than %d levels; flatten them", maxMergeDepth)
				return
			}
			visited[s] = true
			p.collectKeys(s, path, keys, out, done, visited, true, depth+1)
		}
	}
}

var keyNormalizer = strings.NewReplacer("_", "-", " ", "-")

// unknownKey reports a key the struct does not declare, suggesting the
// likely intended one.
func (p *Parser) unknownKey(line int, path, name string, known []string) {
	norm := keyNormalizer.Replace(strings.ToLower(name))
	for _, k := range known {
		if k == norm || strings.ReplaceAll(k, "-", "") == norm {
			p.Errorf(line, path, "unknown key; did you mean %s?", k)
			return
		}
	}
	p.Errorf(line, path, "unknown key; the keys here are %s", strings.Join(known, ", "))
}

// Item is where one entry of a list, a mapping's key or a value is
// written, for messages.
type Item struct {
	Path string
	Line int // line of the element (or of its key) where it is written
	// def is a leaf key's default: tag, which messages mark in the list
	// of allowed values (markDefault).
	Def string
}

// KeyPath is the path of key name under parent, as messages and
// Parser.Lines name it (a name that is not a plain word is quoted).
func KeyPath(parent, name string) string { return joinPath(parent, Show(name)) }

// joinPath appends name to parent, as written.
func joinPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// article prefixes a noun with "a" or "an".
func article(noun string) string {
	if noun != "" && strings.ContainsRune("aeiou", rune(noun[0])) {
		return "an " + noun
	}
	return "a " + noun
}
