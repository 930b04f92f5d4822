// SPDX-License-Identifier: Apache-2.0

package guard

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// adviceInKernel are the forms advice to a user takes in a message: a
// question, a command to type, an imperative. The kernel packages say what
// failed and the errno ("ip link add x type bond: operation not
// supported"); what to do about it depends on who asked, so it is written
// by the caller: internal/diag for doctor checks, otherwise the error
// wrapping of the command or daemon that knows the field and the file.
var adviceInKernel = []struct {
	re   *regexp.Regexp
	form string
}{
	{regexp.MustCompile(`\?`), "a question to the user"},
	{regexp.MustCompile("`"), "a command to type"},
	{regexp.MustCompile(`(?i)\b(run as|check (the|that|with)|use an?|ping it|add one|try|install|enable|upgrade|modprobe|lspci|systemd|needs root|see )\b`), "an imperative or a fix"},
	{regexp.MustCompile(`(?i)\be\.g\.|docs/`), "an example or a docs page"},
}

// TestKernelPackagesStateFacts: issue 25's "fix text meant for users
// belongs in diag, not kernel", kept true for new messages.
func TestKernelPackagesStateFacts(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.ImportPath != "sluice/internal/kernel" && !strings.HasPrefix(p.ImportPath, "sluice/internal/kernel/") {
			continue
		}
		dir := strings.TrimPrefix(p.ImportPath, "sluice/")
		for _, f := range p.GoFiles {
			if strings.HasSuffix(f, "_bpfel.go") {
				continue
			}
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, filepath.Join("..", "..", dir, f), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil || !strings.Contains(s, " ") { // messages have words; keys and paths do not
					return true
				}
				for _, a := range adviceInKernel {
					if m := a.re.FindString(s); m != "" {
						t.Errorf("%s: %q has %s (%q): the kernel packages state facts; write the fix where the error is wrapped (internal/diag for doctor checks, else the caller)", fset.Position(lit.Pos()), s, a.form, m)
						break
					}
				}
				return true
			})
		}
	}
}
