// SPDX-License-Identifier: Apache-2.0

package guard

import (
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
)

type pkg struct {
	ImportPath string
	Doc        string
	Imports    []string
	GoFiles    []string
}

// goList is `go list -json sluice/...`, run once for all the guard tests
// (a few seconds on a busy machine each time).
var goList = sync.OnceValues(func() ([]pkg, error) {
	out, err := exec.Command("go", "list", "-json", "sluice/...").Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
})

func listPackages(t *testing.T) []pkg {
	t.Helper()
	pkgs, err := goList()
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// TestImportRules: each rule says which packages may import what, and why.
func TestImportRules(t *testing.T) {
	// kernel is internal/kernel and its concept packages (xfrm, tcflower).
	kernel := func(p string) bool {
		return p == "sluice/internal/kernel" || strings.HasPrefix(p, "sluice/internal/kernel/")
	}
	only := func(ps ...string) func(string) bool {
		return func(p string) bool { return slices.Contains(ps, p) }
	}
	const viaKernel = "the kernel's netlink goes through internal/kernel/..., the one place that also adds what the library lacks"
	rules := []struct {
		imp     string
		allowed func(pkg string) bool
		why     string
	}{
		{"github.com/vishvananda/netlink", kernel, viaKernel},
		{"github.com/vishvananda/netlink/nl", kernel, viaKernel},
		{"github.com/safchain/ethtool", kernel, "ethtool goes through internal/kernel, like netlink"},
		{"sluice/internal/gateway", only("sluice/internal/cli"),
			"the gateway daemon is run by the CLI (gateway run|stop|explain); the parts it drives (fastpath, flower, api) must not depend on it"},
	}
	noExec := map[string]string{
		"sluice/internal/fastpath": "the data path's control plane talks to the kernel directly",
		"sluice/internal/gateway":  "the daemon talks to the kernel directly and runs nothing",
		"sluice/internal/api":      "the API serves state; it runs nothing",
		"sluice/internal/config":   "parsing is pure",
	}
	for _, p := range listPackages(t) {
		for _, imp := range p.Imports {
			for _, r := range rules {
				if imp == r.imp && !r.allowed(p.ImportPath) {
					t.Errorf("%s imports %s: %s", p.ImportPath, imp, r.why)
				}
			}
			if imp == "sluice/internal/testutil" {
				t.Errorf("%s imports internal/testutil: test helpers are for _test.go files only", p.ImportPath)
			}
			if kernel(p.ImportPath) && imp == "os/exec" {
				t.Errorf("%s imports os/exec: netlink and sysfs, never by shelling out to ip", p.ImportPath)
			}
			if why, ok := noExec[p.ImportPath]; ok && imp == "os/exec" {
				t.Errorf("%s imports os/exec: %s", p.ImportPath, why)
			}
		}
		if strings.HasPrefix(p.ImportPath, "sluice/internal/kernel/") {
			for _, imp := range p.Imports {
				// nlattr is the attribute codec they share, itself a leaf.
				if strings.HasPrefix(imp, "sluice/") && imp != "sluice/internal/kernel/nlattr" {
					t.Errorf("%s imports %s: a kernel concept package is a leaf (internal/kernel itself imports them, for its probes)", p.ImportPath, imp)
				}
			}
		}
		if p.ImportPath == "sluice/internal/mtu" {
			for _, imp := range p.Imports {
				if strings.HasPrefix(imp, "sluice/") {
					t.Errorf("internal/mtu imports %s: the MTU arithmetic is a leaf every part shares", imp)
				}
			}
		}
		if p.ImportPath == "sluice/internal/driverquirk" {
			for _, imp := range p.Imports {
				// fileread is a leaf too: the one bounded reader (the model's profile).
				if strings.HasPrefix(imp, "sluice/") && imp != "sluice/internal/fileread" {
					t.Errorf("internal/driverquirk imports %s: the driver table is a leaf the gateway, overlay and diag share", imp)
				}
			}
		}
		if p.ImportPath == "sluice/internal/config" {
			for _, imp := range p.Imports {
				// fileread and yamldoc are leaves (they import nothing of
				// sluice): the one bounded reader and the one YAML dialect.
				if strings.HasPrefix(imp, "sluice/") && imp != "sluice/internal/fileread" && imp != "sluice/internal/yamldoc" {
					t.Errorf("internal/config imports %s: configuration must not depend on the parts it configures", imp)
				}
			}
		}
		if p.ImportPath == "sluice/internal/yamldoc" {
			for _, imp := range p.Imports {
				if strings.HasPrefix(imp, "sluice/") {
					t.Errorf("internal/yamldoc imports %s: the YAML dialect is a leaf that config, tune and bench share", imp)
				}
			}
		}
	}
}

// TestEveryPackageIsDocumented: a newcomer reads the package comment first.
func TestEveryPackageIsDocumented(t *testing.T) {
	for _, p := range listPackages(t) {
		if len(p.GoFiles) > 0 && strings.TrimSpace(p.Doc) == "" {
			t.Errorf("%s has no package doc comment (add one to doc.go saying what the package is for)", p.ImportPath)
		}
	}
}
