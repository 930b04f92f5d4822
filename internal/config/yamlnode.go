// SPDX-License-Identifier: Apache-2.0

package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// The YAML walker shared by the config files: strict (unknown keys,
// duplicate keys and wrong types are errors), line-aware, alias- and
// merge-key-aware, and never panicking.

// The walk visits each key, list item and merged mapping once per place
// it is used, so aliases and merge keys can make a small file expensive.
// The budget of visits is expansionPerByte per byte of input (plenty for
// files that merge a few anchors into each entry; a merge key costs a few
// bytes and brings in a whole mapping), at least minExpansion and at most
// maxExpansion (a lab file with 65,536 policies of every key stays below
// it).
const (
	expansionPerByte = 8
	minExpansion     = 1 << 16
	maxExpansion     = 1 << 22
)

// maxErrors bounds the distinct errors reported for one file.
const maxErrors = 500

// maxMergeDepth bounds nested merge keys (a mapping merging a mapping that
// merges another ...).
const maxMergeDepth = 32

// parser collects errors and what was present while walking one document.
type parser struct {
	file string
	errs []*FieldError
	// lines holds the line of every key present (by path), null or not.
	lines map[string]int
	// given holds the paths of keys present with a non-null value; defaults
	// fill only what is not given.
	given map[string]bool
	// bad holds paths that already have an error, so checks that combine
	// fields stay quiet about a field that is wrong on its own.
	bad map[string]bool
	// budget counts down keys and items visited; see maxExpansion.
	budget, initBudget int
	// overBudg is the error for a document over budget; it replaces all
	// others.
	overBudg *FieldError
	// seen holds the errors recorded, to drop repeats (a merged mapping
	// is reported once per entry that merges it).
	seen map[string]bool
	// truncated is set when more than maxErrors were found.
	truncated bool
	// leaves are the values of the plain tree (yamlschema.go), by index.
	leaves []leaf
	// items holds the list entries kept for decoding, by the list's path;
	// counts, how many entries the list has as written.
	items  map[string][]item
	counts map[string]int
}

func newParser(file string, size int) *parser {
	budget := min(max(size*expansionPerByte, minExpansion), maxExpansion)
	return &parser{
		file:   file,
		lines:  map[string]int{},
		given:  map[string]bool{},
		bad:    map[string]bool{},
		seen:   map[string]bool{},
		items:  map[string][]item{},
		counts: map[string]int{},
		budget: budget, initBudget: budget,
	}
}

func (p *parser) errorf(line int, path, format string, args ...any) {
	if len(p.errs) == maxErrors {
		// Past this, checks that combine fields can only add noise, and
		// remembering more paths would only grow memory.
		p.truncated = true
		return
	}
	p.bad[path] = true
	e := &FieldError{File: p.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)}
	if s := e.Error(); !p.seen[s] {
		p.seen[s] = true
		p.errs = append(p.errs, e)
	}
}

// result is the collected errors as a *ValidationErrors, or nil.
func (p *parser) result() error {
	if p.overBudg != nil {
		// Whatever else was found comes from a walk cut short.
		return &ValidationErrors{Errors: []*FieldError{p.overBudg}}
	}
	v := newValidationErrors(p.errs)
	if v == nil {
		return nil
	}
	if p.truncated {
		last := v.Errors[len(v.Errors)-1]
		v.Errors = append(v.Errors, &FieldError{File: p.file, Line: last.Line,
			Msg: fmt.Sprintf("stopped after %d problems; fix these and run again", maxErrors)})
	}
	return v
}

// spend takes one unit of the expansion budget and reports whether the
// walk may go on.
func (p *parser) spend(line int) bool {
	if p.budget > 0 {
		p.budget--
		return true
	}
	if p.overBudg == nil {
		p.overBudg = &FieldError{File: p.file, Line: line,
			Msg: fmt.Sprintf("the document expands through aliases and merge keys to more keys and list items than sluice walks (%d for a file this size); use fewer aliases", p.initBudget)}
	}
	return false
}

// lineOf returns the line of the key at path, or fallback when absent.
func (p *parser) lineOf(path string, fallback int) int {
	if l, ok := p.lines[path]; ok {
		return l
	}
	return fallback
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// document parses data and returns the root mapping, or nil after
// recording why there is none.
func (p *parser) document(data []byte) (root *yaml.Node) {
	// yaml.v3 is third-party code: whatever it does on hostile input, the
	// caller gets an error, not a panic.
	defer func() {
		if r := recover(); r != nil {
			p.errorf(0, "", "the YAML parser failed on this input (%v); check the file's syntax", r)
			root = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorf(1, "", "the file is empty; a gateway needs at least an interfaces: list (see docs/gateway-config.md)")
		} else {
			p.yamlError(err, data)
		}
		return nil
	}
	for {
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			p.yamlError(err, data)
			return nil
		}
		if n := docContent(&extra); n != nil && !isNull(n) {
			p.errorf(extra.Line, "", "a second YAML document starts here; the file holds one document: remove the '---' line and what follows, or merge it into the first")
			break
		}
	}
	n := docContent(&doc)
	if n == nil || isNull(n) {
		p.errorf(1, "", "the file is empty; a gateway needs at least an interfaces: list (see docs/gateway-config.md)")
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, "", "the top level must be a mapping of keys such as interfaces:, not %s", kindName(n))
		return nil
	}
	return n
}

// docContent returns the (alias-resolved) content of a document node.
func docContent(doc *yaml.Node) *yaml.Node {
	n := doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	return deref(n)
}

var yamlAnchorRE = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)

// yamlError records a syntax error from yaml.v3 with the best line it can
// find: yaml.v3 omits the line when it is the first, and gives none for
// bad characters or unknown anchors.
func (p *parser) yamlError(err error, data []byte) {
	msg := oneLine(strings.TrimPrefix(err.Error(), "yaml: "))
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		hint := ""
		if l := colonEndLine(data, line); l > 0 {
			line, hint = l, `; an IPv6 address ending in :: must be quoted ("2001:db8::")`
		}
		p.errorf(line, "", "invalid YAML here or just after: %s%s", oneLine(m[2]), hint)
		return
	}
	line := 1
	if m := yamlAnchorRE.FindStringSubmatch(msg); m != nil {
		if i := bytes.Index(data, []byte("*"+m[1])); i >= 0 {
			line = len(splitLines(data[:i]))
		}
		p.errorf(line, "", "invalid YAML: %s; an alias (*%s) must come after its anchor (&%s)", msg, m[1], m[1])
		return
	}
	if l := badCharLine(data); l > 0 {
		line = l
	}
	p.errorf(line, "", "invalid YAML: %s", msg)
}

var colonEndRE = regexp.MustCompile(`::\s*(#.*)?$`)

// colonEndLine returns line or line+1 if that line ends in "::" (an
// unquoted IPv6 address such as 2001:db8::, which YAML reads as a key),
// else 0.
func colonEndLine(data []byte, line int) int {
	lines := splitLines(data)
	for _, l := range []int{line, line + 1} {
		if l >= 1 && l <= len(lines) && colonEndRE.Match(lines[l-1]) {
			return l
		}
	}
	return 0
}

// splitLines splits data at "\n", "\r\n" and "\r", as YAML counts lines.
func splitLines(data []byte) [][]byte {
	var out [][]byte
	start := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '\n':
			out = append(out, data[start:i])
			start = i + 1
		case '\r':
			out = append(out, data[start:i])
			if i+1 < len(data) && data[i+1] == '\n' {
				i++
			}
			start = i + 1
		}
	}
	return append(out, data[start:])
}

// badCharLine returns the line of the first byte sequence YAML does not
// allow in a document (invalid UTF-8 or a control character other than
// tab, newline and carriage return), or 0.
func badCharLine(data []byte) int {
	for n, l := range splitLines(data) {
		for i := 0; i < len(l); {
			r, size := utf8.DecodeRune(l[i:])
			switch {
			case r == utf8.RuneError && size <= 1,
				r < 0x20 && r != '\t',
				r >= 0x7f && r < 0xa0 && r != 0x85,
				r >= 0xd800 && r < 0xe000, r == 0xfffe, r == 0xffff:
				return n + 1
			}
			i += size
		}
	}
	return 0
}

// show returns v as it is when it is a plain word, else quoted, so that
// no value from the file can break a message's single line.
func show(v string) string {
	if v == "" {
		return `""`
	}
	for _, r := range v {
		if !unicode.IsGraphic(r) || unicode.IsSpace(r) || r == utf8.RuneError {
			return strconv.Quote(v)
		}
	}
	return v
}

// oneLine flattens a message from yaml.v3 onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// nullNode stands in for an alias without a target (which yaml.v3 does not
// produce, but the walker must not crash on it).
var nullNode = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}

// deref follows aliases to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; i < 8; i++ {
		if n == nil {
			return nullNode
		}
		if n.Kind != yaml.AliasNode {
			return n
		}
		n = n.Alias
	}
	return nullNode
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// kindName describes a node for "want X, got Y" messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping (key: value lines)"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "nothing"
		case "!!bool":
			return fmt.Sprintf("the boolean %s", show(n.Value))
		case "!!int", "!!float":
			return fmt.Sprintf("the number %s", show(n.Value))
		case "!!str":
			return fmt.Sprintf("the string %q", n.Value)
		}
		return fmt.Sprintf("a %s value", show(n.ShortTag()))
	}
	return "an unsupported YAML node"
}

// field is one key: value of a mapping.
type field struct {
	name string
	path string
	line int        // line of the key
	val  *yaml.Node // alias-resolved value
}

func joinPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// key is one key of a mapping and what its value sets. A mapping's table
// of keys declares each key once: its name (the known keys, in the order
// messages list them) and its arm.
type key struct {
	name string
	set  func(f field)
}

// each walks the known, non-null keys of mapping m in document order and
// calls each one's set, after before (if given).
func (p *parser) each(m *yaml.Node, path string, keys []key, before ...func(field)) {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.name
	}
	for _, f := range p.fields(m, path, names) {
		for _, b := range before {
			b(f)
		}
		for _, k := range keys {
			if k.name == f.name {
				k.set(f)
				break
			}
		}
	}
}

// fields returns the known, non-null keys of mapping m in document order,
// with merge keys (<<: *anchor) expanded: keys written in m win over merged
// ones, and earlier merges win over later ones, as YAML specifies. Unknown
// keys, duplicate keys and non-scalar keys are errors. Every key present,
// null or not, gets its line recorded.
func (p *parser) fields(m *yaml.Node, path string, known []string) []field {
	var all []field
	visited := map[*yaml.Node]bool{m: true}
	p.collect(m, path, known, &all, visited, false, 0)
	out := all[:0]
	for _, f := range all {
		if !isNull(f.val) {
			p.given[f.path] = true
			out = append(out, f)
		}
	}
	return out
}

// collect appends the keys of m (and of the mappings it merges) to out.
func (p *parser) collect(m *yaml.Node, path string, known []string, out *[]field, visited map[*yaml.Node]bool, merged bool, depth int) {
	var merges []*yaml.Node
	here := map[string]int{} // keys written in this mapping -> line
	for i := 0; i+1 < len(m.Content); i += 2 {
		kn, vn := m.Content[i], m.Content[i+1]
		if !p.spend(kn.Line) {
			return
		}
		k := deref(kn)
		if k.Kind != yaml.ScalarNode {
			p.errorf(kn.Line, path, "a key must be a plain word such as name, not %s", kindName(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, vn)
			continue
		}
		name := k.Value
		fp := joinPath(path, show(name))
		if first, dup := here[name]; dup {
			if !merged {
				p.errorf(kn.Line, fp, "set twice (first on line %d); keep one", first)
			}
			continue
		}
		here[name] = kn.Line
		if !slices.Contains(known, name) {
			p.unknownKey(kn.Line, fp, name, known)
			continue
		}
		if slices.ContainsFunc(*out, func(f field) bool { return f.name == name }) {
			// Already set by the mapping that merges this one: it wins.
			continue
		}
		p.lines[fp] = kn.Line
		*out = append(*out, field{name: name, path: fp, line: kn.Line, val: deref(vn)})
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
			p.errorf(mv.Line, joinPath(path, "<<"), "a merge key takes a mapping or a list of mappings (such as <<: *defaults), not %s", kindName(src))
			continue
		}
		for _, s := range list {
			if !p.spend(mv.Line) {
				return
			}
			if s.Kind != yaml.MappingNode {
				p.errorf(mv.Line, joinPath(path, "<<"), "a merge key takes mappings only (such as <<: *defaults), not %s", kindName(s))
				continue
			}
			if visited[s] {
				continue
			}
			if depth >= maxMergeDepth {
				p.errorf(mv.Line, joinPath(path, "<<"), "merge keys nest deeper than %d levels; flatten them", maxMergeDepth)
				return
			}
			visited[s] = true
			p.collect(s, path, known, out, visited, true, depth+1)
		}
	}
}

var keyNormalizer = strings.NewReplacer("_", "-", " ", "-")

// unknownKey reports a key the schema does not have, suggesting the
// likely intended one.
func (p *parser) unknownKey(line int, path, name string, known []string) {
	norm := keyNormalizer.Replace(strings.ToLower(name))
	for _, k := range known {
		if k == norm || strings.ReplaceAll(k, "-", "") == norm {
			p.errorf(line, path, "unknown key; did you mean %s?", k)
			return
		}
	}
	p.errorf(line, path, "unknown key; the keys here are %s", strings.Join(known, ", "))
}

// item is one element of a list of mappings.
type item struct {
	path string
	line int        // line of the element where it is written
	node *yaml.Node // alias-resolved mapping
}

// mappings returns the elements of a list of mappings. what names one
// element for messages ("interface"); example is a minimal element.
func (p *parser) mappings(f field, what, example string) []item {
	if f.val.Kind != yaml.SequenceNode {
		p.errorf(f.line, f.path, "want a list of %ss (lines starting with '- '), got %s", what, kindName(f.val))
		return nil
	}
	var out []item
	for i, c := range f.val.Content {
		if !p.spend(c.Line) {
			return out
		}
		path := fmt.Sprintf("%s[%d]", f.path, i)
		n := deref(c)
		switch {
		case isNull(n):
			p.errorf(c.Line, path, "empty list item; remove the '-' or fill in the %s", what)
		case n.Kind != yaml.MappingNode:
			p.errorf(c.Line, path, "want %s written as keys (such as - %s), got %s", article(what), example, kindName(n))
		default:
			out = append(out, item{path: path, line: c.Line, node: n})
		}
	}
	return out
}

// article prefixes a noun with "a" or "an".
func article(noun string) string {
	if noun != "" && strings.ContainsRune("aeiou", rune(noun[0])) {
		return "an " + noun
	}
	return "a " + noun
}

// str returns a scalar's text; what describes the expected value.
func (p *parser) str(f field, what string) (string, bool) {
	if f.val.Kind != yaml.ScalarNode {
		p.errorf(f.line, f.path, "want %s, got %s", what, kindName(f.val))
		return "", false
	}
	return f.val.Value, true
}

// boolean accepts true and false only (YAML 1.2), not yes/no/on/off.
func (p *parser) boolean(f field) (bool, bool) {
	n := f.val
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		switch strings.ToLower(n.Value) {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		switch strings.ToLower(n.Value) {
		case "true", "false":
			p.errorf(f.line, f.path, "%q is quoted, so it is a string; write %s without quotes", n.Value, strings.ToLower(n.Value))
			return false, false
		}
	}
	p.errorf(f.line, f.path, "want true or false, got %s", kindName(n))
	return false, false
}

// uint parses a non-negative integer up to limit.
func (p *parser) uint(f field, limit uint64) (uint64, bool) {
	n := f.val
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		p.errorf(f.line, f.path, "want a whole number from 0 to %d, got %s", limit, kindName(n))
		return 0, false
	}
	s := strings.TrimPrefix(n.Value, "+")
	if strings.HasPrefix(s, "-") {
		p.errorf(f.line, f.path, "%s is negative; use a number from 0 to %d", show(n.Value), limit)
		return 0, false
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		p.errorf(f.line, f.path, "want a whole number from 0 to %d, got %s", limit, show(n.Value))
		return 0, false
	}
	if err != nil || v > limit {
		p.errorf(f.line, f.path, "%s is out of range; use a number from 0 to %d", show(n.Value), limit)
		return 0, false
	}
	return v, true
}

// enum parses one of allowed; def, when not empty, is marked as the
// default in messages.
func enum[T ~string](p *parser, f field, def T, allowed ...T) T {
	list := enumList(def, allowed)
	s, ok := p.str(f, "one of "+list)
	if !ok {
		return ""
	}
	for _, a := range allowed {
		if string(a) == s {
			return a
		}
	}
	p.errorf(f.line, f.path, "%q is not valid; use one of %s", s, list)
	return ""
}

func enumList[T ~string](def T, allowed []T) string {
	parts := make([]string, len(allowed))
	for i, a := range allowed {
		parts[i] = string(a)
		if a == def && def != "" {
			parts[i] += " (default)"
		}
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
}

// The field readers below are the host file's, until it moves to tagged
// structs too.

// ifname parses a Linux interface name.
func (p *parser) ifname(f field) string {
	s, ok := p.str(f, "a Linux interface name such as p0")
	if !ok {
		return ""
	}
	if problem := ifnameProblem(s); problem != "" {
		p.errorf(f.line, f.path, "%s", problem)
		return ""
	}
	return s
}

// addr parses an IP address (IPv4 or IPv6, no zone, not unspecified).
func (p *parser) addr(f field, what string) netip.Addr {
	s, ok := p.str(f, what+" (an IP address)")
	if !ok {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		p.errorf(f.line, f.path, "%q is not an IP address; write %s such as 192.0.2.1 or 2001:db8::1", s, what)
	case a.Zone() != "":
		p.errorf(f.line, f.path, "%q has an IPv6 zone; remove %%%s (the interface is known from the rest of the file)", s, show(a.Zone()))
	case a.IsUnspecified():
		p.errorf(f.line, f.path, "%s is the unspecified address; write %s", s, what)
	case a.Is4In6():
		p.errorf(f.line, f.path, "%s", mappedMsg(s, a))
	default:
		return a
	}
	return netip.Addr{}
}

// prefix parses a selector prefix; a bare address is a /32 or /128.
func (p *parser) prefix(f field) netip.Prefix {
	s, ok := p.str(f, "a prefix such as 10.0.0.0/8")
	if !ok {
		return netip.Prefix{}
	}
	var pf netip.Prefix
	if strings.Contains(s, "/") {
		v, err := netip.ParsePrefix(s)
		if err != nil {
			p.errorf(f.line, f.path, "%q is not an IP prefix; write one such as 10.0.0.0/8 or 2001:db8::/32, or a bare address for one host", s)
			return netip.Prefix{}
		}
		if v != v.Masked() {
			p.errorf(f.line, f.path, "%q has bits set after the /%d; write %s", s, v.Bits(), v.Masked())
			return netip.Prefix{}
		}
		if v.Addr().Is4In6() {
			p.errorf(f.line, f.path, "%s", mappedMsg(s, v.Addr()))
			return netip.Prefix{}
		}
		pf = v
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			p.errorf(f.line, f.path, "%q is not an IP prefix; write one such as 10.0.0.0/8 or 2001:db8::/32, or a bare address for one host", s)
			return netip.Prefix{}
		}
		if a.Zone() != "" {
			p.errorf(f.line, f.path, "%q has an IPv6 zone; selectors have none: remove %%%s", s, show(a.Zone()))
			return netip.Prefix{}
		}
		if a.Is4In6() {
			p.errorf(f.line, f.path, "%s", mappedMsg(s, a))
			return netip.Prefix{}
		}
		pf = netip.PrefixFrom(a, a.BitLen())
	}
	return pf
}

var portRangeRE = regexp.MustCompile(`^\s*\d+\s*[-:]\s*\d+\s*$`)

// port parses a single port, 1 to 65535.
func (p *parser) port(f field) uint16 {
	n := f.val
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" && portRangeRE.MatchString(n.Value) {
		p.errorf(f.line, f.path, "%q is a range, and sluice takes a single port: an XFRM selector holds a port as one value and mask, not a range; write one policy per port, or remove %s to match any port", n.Value, f.name)
		return 0
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		p.errorf(f.line, f.path, "want a single port number from 1 to 65535, got %s", kindName(n))
		return 0
	}
	v, ok := p.uint(f, 65535)
	if !ok {
		return 0
	}
	if v == 0 {
		p.errorf(f.line, f.path, "port 0 matches nothing; remove %s to match any port", f.name)
		return 0
	}
	return uint16(v)
}
