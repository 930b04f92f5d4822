// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Every --json document is an object with the sluice version that wrote
// it first, as the daemon's API has.
func TestJSONHasVersion(t *testing.T) {
	for _, args := range [][]string{
		{"show", "interface", "topology", "--sysroot", cx7Root, "--json"},
		{"tune", "check", "-f", "../tune/testdata/seed004.yaml", "--sysroot", cx7Root, "--json"},
		{"mtu", "--json"},
	} {
		out, _ := runCLI(t, args...)
		var doc map[string]json.RawMessage
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("sluice %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if string(doc["version"]) != `"`+version+`"` || !strings.HasPrefix(out, "{\n  \"version\":") {
			t.Errorf("sluice %s: want \"version\": %q first:\n%.200s", strings.Join(args, " "), version, out)
		}
	}
}

// Each command's --help lists the exit codes it returns, from the one
// table: verify said "1: something failed" where it returned 3.
func TestExitCodeHelpFromTable(t *testing.T) {
	out, err := runCLI(t, "verify", "--help")
	if err != nil || !strings.Contains(out, "3  check failed: a check failed") || strings.Contains(out, "1: something failed") {
		t.Errorf("verify --help does not list exit 3 from the table:\n%s", out)
	}
	walk(NewRootCommand(), func(c *cobra.Command) {
		if c.Runnable() && c.Parent() != nil && !strings.Contains(c.Long, "Exit codes:\n  0  done") {
			t.Errorf("%s --help has no exit codes", c.CommandPath())
		}
	})
}

// No command returns a literal exit code: bench rekey returned 1 for a
// lost datagram, a difference found (3). The codes are the table's names.
func TestNoLiteralExitCodes(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			kv, ok := n.(*ast.KeyValueExpr)
			if !ok {
				return true
			}
			if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Code" {
				if _, lit := kv.Value.(*ast.BasicLit); lit {
					t.Errorf("%s: ExitError with a literal code: use a name from the table (ExitCheckFailed, ...)", fset.Position(kv.Pos()))
				}
			}
			return true
		})
	}
}

// The input file of every command is -f/--file; the old names (-c,
// --config, --host) are hidden aliases of the same flag.
func TestOneInputFlagName(t *testing.T) {
	walk(NewRootCommand(), func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if (f.Name == "config" || f.Name == "host" || f.Shorthand == "c") && !f.Hidden {
				t.Errorf("%s: --%s is visible: the input file is -f/--file", c.CommandPath(), f.Name)
			}
		})
	})
	_, errNew := runCLI(t, "doctor", "-f", "/nonexistent/host.yaml")
	_, errOld := runCLI(t, "doctor", "--host", "/nonexistent/host.yaml")
	if errNew == nil || errOld == nil || errNew.Error() != errOld.Error() {
		t.Errorf("doctor --host is not -f: %v / %v", errOld, errNew)
	}
}

func walk(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, sub := range c.Commands() {
		walk(sub, f)
	}
}
