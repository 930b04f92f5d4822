// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// sysSeeds returns the contents of the testdata files (the recorded sysfs
// and procfs trees) whose names pass keep, one of each.
func sysSeeds(f *testing.F, keep func(name string) bool) []string {
	seen := map[string]bool{}
	var out []string
	filepath.WalkDir("testdata", func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && keep(d.Name()) {
			if b, err := os.ReadFile(p); err == nil && !seen[string(b)] {
				seen[string(b)] = true
				out = append(out, string(b))
			}
		}
		return nil
	})
	if len(out) == 0 {
		f.Fatal("no seeds in testdata")
	}
	return out
}

// FuzzParseCPUList checks the kernel list format reader (sysfs cpulist,
// smp_affinity_list, tune profiles' cpus): accepted sets hold CPUs in
// 0..MaxCPUs-1, and CPUSet.String, which sluice prints and writes back to
// the kernel, reads back as the same set.
//
//	go test -run '^$' -fuzz '^FuzzParseCPUList$' -fuzztime 30s ./internal/diag/
func FuzzParseCPUList(f *testing.F) {
	for _, s := range sysSeeds(f, func(n string) bool {
		return strings.HasSuffix(n, "list") || n == "online" || n == "possible"
	}) {
		f.Add(s)
	}
	for _, s := range []string{"", "(null)", "0-3,8,10-11", " 4-13 ", "0-400000000", "3-1", "1,,2", "-1", "0-8191"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := ParseCPUList(s)
		if err != nil {
			if set != nil {
				t.Fatalf("a set and an error")
			}
			return
		}
		for c := range set {
			if c < 0 || c >= MaxCPUs {
				t.Fatalf("%q holds CPU %d", s, c)
			}
		}
		back, err := ParseCPUList(set.String())
		if err != nil || !reflect.DeepEqual(back, set) {
			t.Fatalf("%q -> %q -> %v, %v", s, set.String(), back.Sorted(), err)
		}
	})
}

// FuzzParseCPUMask checks the hex mask reader (smp_affinity, rps_cpus,
// xps_cpus): what it accepts reads back the same from the kernel's
// format (32-bit words, most significant first), and agrees with the list
// form of the same set.
//
//	go test -run '^$' -fuzz '^FuzzParseCPUMask$' -fuzztime 30s ./internal/diag/
func FuzzParseCPUMask(f *testing.F) {
	for _, s := range sysSeeds(f, func(n string) bool {
		return n == "default_smp_affinity" || n == "rps_cpus" || n == "xps_cpus" || n == "smp_affinity"
	}) {
		f.Add(s)
	}
	f.Add("00000000,0000000f\n")
	f.Add("ffffffff,ffffffff,ffffffff")
	f.Fuzz(func(t *testing.T, s string) {
		set, err := ParseCPUMask(s)
		if err != nil {
			return
		}
		back, err := ParseCPUMask(cpuMask(set))
		if err != nil || !reflect.DeepEqual(back, set) {
			t.Fatalf("%q -> %q -> %v, %v", s, cpuMask(set), back.Sorted(), err)
		}
		if l, err := ParseCPUList(set.String()); err != nil || !reflect.DeepEqual(l, set) {
			t.Fatalf("mask %q as a list %q: %v, %v", s, set.String(), l.Sorted(), err)
		}
	})
}

// cpuMask writes set in the kernel's mask format.
func cpuMask(set CPUSet) string {
	top := 0
	for c := range set {
		top = max(top, c)
	}
	words := make([]string, top/32+1)
	for i := range words {
		var w uint32
		for b := 0; b < 32; b++ {
			if set[i*32+b] {
				w |= 1 << b
			}
		}
		words[len(words)-1-i] = fmt.Sprintf("%08x", w)
	}
	return strings.Join(words, ",")
}
