// SPDX-License-Identifier: Apache-2.0

package tune

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"sluice/internal/diag"
)

// FuzzParseTuneProfile checks tune.yaml: an accepted profile passes its own
// validation again, its sysctl names stay under /proc/sys, its interface
// names are names the kernel accepts (they go into ethtool commands and
// sysfs paths), and its CPU lists give one CPU per RX queue.
//
//	go test -run '^$' -fuzz '^FuzzParseTuneProfile$' -fuzztime 30s ./internal/tune/
func FuzzParseTuneProfile(f *testing.F) {
	for _, p := range []string{filepath.Join("testdata", "seed004.yaml"), filepath.Join("..", "..", "docs", "tune.md")} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		if strings.HasSuffix(p, ".md") {
			for _, block := range bytes.Split(b, []byte("```yaml\n"))[1:] {
				if end := bytes.Index(block, []byte("```")); end >= 0 {
					f.Add(block[:end])
				}
			}
			continue
		}
		f.Add(b)
	}
	f.Add([]byte("sysctls: {net.core.busy_poll: 50}\ninterfaces:\n  p0: {rx-queues: 2, cpus: 0-400000000, rss-equal: 2, pcie-max-read-req: 4096}\n"))
	f.Add([]byte("interfaces:\n  ../../x: {rx-queues: 1}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse("fuzz.yaml", b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if err := p.validate(); err != nil {
			t.Fatalf("accepted, then refused: %v", err)
		}
		for k := range p.Sysctls {
			f := "/proc/sys/" + strings.ReplaceAll(k, ".", "/")
			if c := path.Clean(f); !strings.HasPrefix(c, "/proc/sys/") || c == "/proc/sys" {
				t.Fatalf("sysctl %q is the file %s", k, c)
			}
		}
		for name, ifc := range p.Interfaces {
			if !kernelIfname(name) {
				t.Fatalf("interface name %q accepted", name)
			}
			if ifc.CPUs == "" {
				continue
			}
			if len(ifc.cpus) == 0 || len(ifc.cpus) < ifc.RxQueues || ifc.cpus[len(ifc.cpus)-1] >= diag.MaxCPUs {
				t.Fatalf("%s: cpus %q -> %d CPUs for %d queues", name, ifc.CPUs, len(ifc.cpus), ifc.RxQueues)
			}
		}
	})
}

// kernelIfname is the kernel's dev_valid_name, plus no control characters.
func kernelIfname(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool { return r == '/' || r == ':' || unicode.IsSpace(r) || unicode.IsControl(r) }) < 0
}
