// SPDX-License-Identifier: Apache-2.0

package guard

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// architectureTalksTo matches a parts-table row and its last column.
var architectureTalksTo = regexp.MustCompile("(?m)^\\| `([a-z0-9_/]+)` \\|.*\\| ([^|]+) \\|$")

// shortName is how the parts table names a sluice package: its path below
// internal/, or below the module for the others (cmd/sluice, profiles).
func shortName(importPath string) string {
	if s, ok := strings.CutPrefix(importPath, "sluice/internal/"); ok {
		return s
	}
	return strings.TrimPrefix(importPath, "sluice/")
}

// claimedParts reads a "talks to" cell: comma-separated items, each
// naming a sluice package by its short name as its first word ("config
// (the SAs ...)"), or something outside sluice ("the running kernel",
// "BPF maps", "charon").
func claimedParts(cell string, parts map[string]bool) []string {
	var out []string
	for item := range strings.SplitSeq(cell, ",") {
		first, _, _ := strings.Cut(strings.TrimSpace(item), " ")
		if parts[first] {
			out = append(out, first)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// unlisted are the sluice packages a row need not name: the bounded file
// reader half the tree imports, which would only be noise in the column.
var unlisted = map[string]bool{"fileread": true}

// TestArchitectureTalksToIsTheImports keeps the table's "talks to" column
// true: the sluice packages a row names are the ones its package imports
// (go list, test files not counted), no more and no fewer (fileread may
// be left out). internal/cli's "every part" is the one row not spelled
// out; test/ rows say what the tests drive.
func TestArchitectureTalksToIsTheImports(t *testing.T) {
	b, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	pkgs := listPackages(t)
	parts := map[string]bool{}
	imports := map[string][]string{}
	for _, p := range pkgs {
		parts[shortName(p.ImportPath)] = true
	}
	for _, p := range pkgs {
		if strings.HasPrefix(p.ImportPath, "sluice/test/") {
			continue // tests: their column says what they drive
		}
		var own []string
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, "sluice/") && !unlisted[shortName(imp)] {
				own = append(own, shortName(imp))
			}
		}
		slices.Sort(own)
		imports[shortName(p.ImportPath)] = own
	}
	checked := 0
	for _, m := range architectureTalksTo.FindAllStringSubmatch(string(b), -1) {
		name, cell := shortName("sluice/"+m[1]), m[2]
		got, listed := imports[name]
		if !listed || strings.TrimSpace(cell) == "every part" {
			continue // tests only, or the CLI
		}
		checked++
		claimed := slices.DeleteFunc(claimedParts(cell, parts), func(s string) bool { return unlisted[s] })
		if !slices.Equal(claimed, got) {
			t.Errorf("docs/architecture.md, row %s: talks to %q, but it imports %q: write its sluice imports in the last column, comma separated, each as the first word of an item", name, claimed, got)
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d rows: did the parts table's layout change?", checked)
	}
}
