// SPDX-License-Identifier: Apache-2.0

package guard

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// architectureRow matches a row of docs/architecture.md's parts table:
// "| `internal/cli` | job | talks to |".
var architectureRow = regexp.MustCompile("(?m)^\\| `([a-z0-9_/]+)` \\|")

// TestEveryPackageHasArchitectureRow keeps the map true: a package that
// docs/architecture.md does not list is one a newcomer cannot find.
func TestEveryPackageHasArchitectureRow(t *testing.T) {
	b, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, m := range architectureRow.FindAllStringSubmatch(string(b), -1) {
		rows[m[1]] = true
	}
	for _, p := range listPackages(t) {
		rel := strings.TrimPrefix(p.ImportPath, "sluice/")
		if !rows[rel] {
			t.Errorf("docs/architecture.md has no row for %s: add \"| `%s` | its job | what it talks to |\" to the parts table", p.ImportPath, rel)
		}
	}
}
