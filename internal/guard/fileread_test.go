// SPDX-License-Identifier: Apache-2.0

package guard

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// unboundedReaders may call os.ReadFile and os.Open directly; everything
// else reads through internal/fileread (a size limit, regular files only).
// Each reads only what the kernel or sluice itself writes.
var unboundedReaders = map[string]string{
	"internal/kernel/":                  "/proc and /sys values the kernel writes",
	"internal/overlay/live.go":          "/proc/sys/kernel/osrelease",
	"internal/lab/forwarder.go":         "/proc/PID and the lab's own gateway log",
	"internal/cli/lab_vm.go":            "copies this binary into the VM cache",
	"internal/swan/charon.go":           "/proc/PID/status and charon's log in the test's directory",
	"internal/bench/report.go":          "/proc/cpuinfo and /proc/thread-self/net/snmp",
	"internal/bench/rekey_counters.go":  "/proc/thread-self/net files held open in each namespace",
	"internal/testutil/ip.go":           "the running kernel's build config (/proc/config.gz, /boot)",
	"internal/testlab/":                 "the host's kernel, modules and busybox for the test VM",
	"internal/fileread/":                "the bounded reader itself",
	"internal/gateway/lock.go":          "opens the pin dir to flock it, and /proc/locks",
	"internal/gateway/pidfile.go":       "the daemon's own pid file and /proc/PID/cmdline",
	"internal/fleet/kubetest/binary.go": "opens the kube-apiserver build's lock file to flock it",
	"internal/driverquirk/model.go":     "the NIC model's profile module parameter in /sys (the table is a leaf package)",
	"internal/agent/reconcile.go":       "opens the state directory to fsync it after a rename",
}

// TestFilesAreReadThroughFileread: /dev/zero as a profile once grew the
// process to 24 GB; a new os.ReadFile of a file the user names must not
// bring that back.
func TestFilesAreReadThroughFileread(t *testing.T) {
	for _, p := range listPackages(t) {
		dir := strings.TrimPrefix(p.ImportPath, "sluice/")
		for _, f := range p.GoFiles {
			rel := filepath.Join(dir, f)
			if allowedReader(rel) {
				continue
			}
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, filepath.Join("..", "..", rel), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "os" && (sel.Sel.Name == "ReadFile" || sel.Sel.Name == "Open") {
					t.Errorf("%s: os.%s: read files through fileread.Read (a size limit, regular files only), or add the file to unboundedReaders with the reason", fset.Position(sel.Pos()), sel.Sel.Name)
				}
				return true
			})
		}
	}
}

func allowedReader(rel string) bool {
	for prefix := range unboundedReaders {
		if strings.HasPrefix(rel, prefix) {
			return true
		}
	}
	return false
}
