// SPDX-License-Identifier: Apache-2.0

package yamldoc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// The YAML walker shared by sluice's files: strict (unknown keys,
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

// MaxErrors bounds the distinct errors reported for one file.
const MaxErrors = 500

// maxMergeDepth bounds nested merge keys (a mapping merging a mapping that
// merges another ...).
const maxMergeDepth = 32

// Parser collects errors and what was present while walking one document.
type Parser struct {
	// File names the file in messages.
	File string
	// Errs are the problems recorded so far.
	Errs []*FieldError
	// Lines holds the line of every key present (by path), null or not.
	Lines map[string]int
	// Given holds the paths of keys present with a non-null value; defaults
	// fill only what is not given.
	Given map[string]bool
	// Bad holds paths that already have an error, so checks that combine
	// fields stay quiet about a field that is wrong on its own.
	Bad map[string]bool
	// budget counts down keys and items visited; see maxExpansion.
	budget, initBudget int
	// overBudg is the error for a document over budget; it replaces all
	// others.
	overBudg *FieldError
	// seen holds the errors recorded, to drop repeats (a merged mapping
	// is reported once per entry that merges it).
	seen map[string]bool
	// truncated is set when more than MaxErrors were found.
	truncated bool
	// leaves are where the values of the plain tree (schema.go) came
	// from, by index.
	leaves []Item
	// Items holds the list entries kept for decoding, by the list's path;
	// Counts, how many entries the list has as written.
	Items  map[string][]Item
	Counts map[string]int
}

// New is a parser for one file, named file in messages, of size bytes
// (which sets the alias budget).
func New(file string, size int) *Parser {
	if file == "" {
		file = "<input>"
	}
	budget := min(max(size*expansionPerByte, minExpansion), maxExpansion)
	return &Parser{
		File:   file,
		Lines:  map[string]int{},
		Given:  map[string]bool{},
		Bad:    map[string]bool{},
		seen:   map[string]bool{},
		Items:  map[string][]Item{},
		Counts: map[string]int{},
		budget: budget, initBudget: budget,
	}
}

func (p *Parser) Errorf(line int, path, format string, args ...any) {
	if len(p.Errs) == MaxErrors {
		// Past this, checks that combine fields can only add noise, and
		// remembering more paths would only grow memory.
		p.truncated = true
		return
	}
	p.Bad[path] = true
	e := &FieldError{File: p.File, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)}
	if s := e.Error(); !p.seen[s] {
		p.seen[s] = true
		p.Errs = append(p.Errs, e)
	}
}

// At is where key of entry it is: the key's line (the entry's when the
// key is absent) and path.
func (p *Parser) At(it Item, key string) (int, string) {
	path := joinPath(it.Path, key)
	if l, ok := p.Lines[path]; ok {
		return l, path
	}
	return it.Line, path
}

// ErrAt records an error at key of entry it.
func (p *Parser) ErrAt(it Item, key, format string, args ...any) {
	l, path := p.At(it, key)
	p.Errorf(l, path, format, args...)
}

// Missing records that required key of entry it is absent, unless its
// value was wrong (already reported).
func (p *Parser) Missing(it Item, key, format string, args ...any) {
	if !p.Bad[joinPath(it.Path, key)] {
		p.ErrAt(it, key, "missing; "+format, args...)
	}
}

// Result is the collected errors as a *ValidationErrors, or nil.
func (p *Parser) Result() error {
	if p.overBudg != nil {
		// Whatever else was found comes from a walk cut short.
		return &ValidationErrors{Errors: []*FieldError{p.overBudg}}
	}
	v := newValidationErrors(p.Errs)
	if v == nil {
		return nil
	}
	if p.truncated {
		last := v.Errors[len(v.Errors)-1]
		v.Errors = append(v.Errors, &FieldError{File: p.File, Line: last.Line,
			Msg: fmt.Sprintf("stopped after %d problems; fix these and run again", MaxErrors)})
	}
	return v
}

// spend takes one unit of the expansion budget and reports whether the
// walk may go on.
func (p *Parser) spend(line int) bool {
	if p.budget > 0 {
		p.budget--
		return true
	}
	if p.overBudg == nil {
		p.overBudg = &FieldError{File: p.File, Line: line,
			Msg: fmt.Sprintf("the document expands through aliases and merge keys to more keys and list items than sluice walks (%d for a file this size); use fewer aliases", p.initBudget)}
	}
	return false
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// Document parses data and returns the root mapping, or nil after
// recording why there is none; needs says what the file needs at least
// (for an empty file) and keys names some of its keys.
func (p *Parser) Document(data []byte, needs, keys string) (root *yaml.Node) {
	// yaml.v3 is third-party code: whatever it does on hostile input, the
	// caller gets an error, not a panic.
	defer func() {
		if r := recover(); r != nil {
			p.Errorf(0, "", "the YAML parser failed on this input (%v); check the file's syntax", r)
			root = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.Errorf(1, "", "the file is empty; %s", needs)
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
			p.Errorf(extra.Line, "", "a second YAML document starts here; the file holds one document: remove the '---' line and what follows, or merge it into the first")
			break
		}
	}
	n := docContent(&doc)
	if n == nil || isNull(n) {
		p.Errorf(1, "", "the file is empty; %s", needs)
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.Errorf(n.Line, "", "the top level must be a mapping of keys such as %s, not %s", keys, KindName(n))
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
func (p *Parser) yamlError(err error, data []byte) {
	msg := oneLine(strings.TrimPrefix(err.Error(), "yaml: "))
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		hint := ""
		if l := colonEndLine(data, line); l > 0 {
			line, hint = l, `; an IPv6 address ending in :: must be quoted ("2001:db8::")`
		}
		p.Errorf(line, "", "invalid YAML here or just after: %s%s", oneLine(m[2]), hint)
		return
	}
	line := 1
	if m := yamlAnchorRE.FindStringSubmatch(msg); m != nil {
		if i := bytes.Index(data, []byte("*"+m[1])); i >= 0 {
			line = len(splitLines(data[:i]))
		}
		p.Errorf(line, "", "invalid YAML: %s; an alias (*%s) must come after its anchor (&%s)", msg, m[1], m[1])
		return
	}
	if l := badCharLine(data); l > 0 {
		line = l
	}
	p.Errorf(line, "", "invalid YAML: %s", msg)
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

// Show returns v as it is when it is a plain word, else quoted, so that
// no value from the file can break a message's single line.
func Show(v string) string {
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

// KindName describes a node for "want X, got Y" messages.
func KindName(n *yaml.Node) string {
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
			return fmt.Sprintf("the boolean %s", Show(n.Value))
		case "!!int", "!!float":
			return fmt.Sprintf("the number %s", Show(n.Value))
		case "!!str":
			return fmt.Sprintf("the string %q", n.Value)
		}
		return fmt.Sprintf("a %s value", Show(n.ShortTag()))
	}
	return "an unsupported YAML node"
}
