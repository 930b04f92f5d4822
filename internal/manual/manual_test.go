// SPDX-License-Identifier: Apache-2.0

package manual

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"sluice/internal/cli"
)

// TestEveryCommandHasAManPage: every command a user can run gets a page
// naming it and every one of its flags. cobra silently skips a command it
// takes for a help topic (no Run and no subcommands) and one that is not
// available; this is where that shows.
func TestEveryCommandHasAManPage(t *testing.T) {
	checkPages(t, cli.NewRootCommand())
}

// TestManPageCheckCatchesAHelpTopic: the check above fails on a command
// cobra writes no page for.
func TestManPageCheckCatchesAHelpTopic(t *testing.T) {
	root := cli.NewRootCommand()
	root.AddCommand(&cobra.Command{Use: "topic", Short: "no Run: cobra treats it as a help topic"})
	ft := &fakeT{TB: t} // TempDir from t; errors collected
	checkPages(ft, root)
	if !strings.Contains(ft.msg, "sluice topic") {
		t.Fatalf("no error for a command without a page; got %q", ft.msg)
	}
}

// fakeT collects errors instead of failing the test.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper()                        {}
func (f *fakeT) Fatalf(format string, a ...any) { f.Errorf(format, a...) }
func (f *fakeT) Errorf(format string, a ...any) {
	f.msg += strings.TrimSpace(fmt.Sprintf(format, a...)) + "\n"
}

func checkPages(t testing.TB, root *cobra.Command) {
	t.Helper()
	dir := t.TempDir()
	if err := Write(root, dir, "test", time.Unix(0, 0)); err != nil {
		t.Fatalf("Write: %v", err)
		return
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		page := filepath.Join(dir, ManDir, PageName(c))
		b, err := os.ReadFile(page)
		if err != nil {
			t.Errorf("%s has no man page (%s): give it a Run or subcommands, and a Short", c.CommandPath(), filepath.Base(page))
		} else {
			text := strings.ReplaceAll(string(b), `\-`, "-") // roff escapes some dashes
			if strings.TrimSpace(c.Short) == "" {
				t.Errorf("%s has no Short: its page's NAME line is empty", c.CommandPath())
			}
			c.NonInheritedFlags().VisitAll(func(f *pflag.Flag) {
				if !f.Hidden && !strings.Contains(text, "--"+f.Name) {
					t.Errorf("%s: the page does not document --%s", page, f.Name)
				}
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for _, f := range []string{BashFile, ZshFile, FishFile} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || !strings.Contains(string(b), "sluice") {
			t.Errorf("completion %s missing or empty: %v", f, err)
		}
	}
}
