// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// MaxCPUs bounds CPU numbers: the kernel's NR_CPUS is at most 8192 on
// x86-64 (MAXSMP), so "0-400000000" is a typo, not a machine, and must not
// build a map of 400 million entries.
const MaxCPUs = 8192

// CPUSet is a set of CPU numbers.
type CPUSet map[int]bool

// ParseCPUList parses the kernel's list format ("0-3,8,10-11"); an empty
// string is the empty set.
func ParseCPUList(s string) (CPUSet, error) {
	set := CPUSet{}
	s = strings.TrimSpace(s)
	if s == "" || s == "(null)" {
		return set, nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpu list %q: %q is not a CPU number", s, lo)
		}
		if a >= MaxCPUs {
			return nil, fmt.Errorf("cpu list %q: CPU %d is past the largest CPU number Linux supports (%d)", s, a, MaxCPUs-1)
		}
		b := a
		if isRange {
			// "0-23:2/4" group syntax of isolcpus is not used by sysfs.
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
			if b >= MaxCPUs {
				return nil, fmt.Errorf("cpu list %q: CPU %d is past the largest CPU number Linux supports (%d)", s, b, MaxCPUs-1)
			}
		}
		for c := a; c <= b; c++ {
			set[c] = true
		}
	}
	return set, nil
}

// ParseCPUMask parses a hexadecimal mask in the kernel's format
// ("00000000,0000000f", most significant word first).
func ParseCPUMask(s string) (CPUSet, error) {
	set := CPUSet{}
	words := strings.Split(strings.TrimSpace(s), ",")
	if len(words) > MaxCPUs/32 {
		return nil, fmt.Errorf("cpu mask %q: %d words is more than %d CPUs", s, len(words), MaxCPUs)
	}
	for i := range words {
		w := words[len(words)-1-i]
		v, err := strconv.ParseUint(w, 16, 32)
		if err != nil {
			return nil, fmt.Errorf("cpu mask %q: %q is not hexadecimal", s, w)
		}
		for v != 0 {
			b := bits.TrailingZeros64(v)
			set[i*32+b] = true
			v &^= 1 << b
		}
	}
	return set, nil
}

// Sorted returns the CPUs in increasing order.
func (s CPUSet) Sorted() []int {
	return slices.Sorted(maps.Keys(s))
}

// String formats the set in the kernel's list format.
func (s CPUSet) String() string {
	cpus := s.Sorted()
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// Intersect returns the CPUs in both sets.
func (s CPUSet) Intersect(o CPUSet) CPUSet {
	out := CPUSet{}
	for c := range s {
		if o[c] {
			out[c] = true
		}
	}
	return out
}

// Minus returns the CPUs of s not in o.
func (s CPUSet) Minus(o CPUSet) CPUSet {
	out := CPUSet{}
	for c := range s {
		if !o[c] {
			out[c] = true
		}
	}
	return out
}

// SubsetOf reports whether every CPU of s is in o.
func (s CPUSet) SubsetOf(o CPUSet) bool {
	for c := range s {
		if !o[c] {
			return false
		}
	}
	return true
}

// Union returns the CPUs in either set.
func (s CPUSet) Union(o CPUSet) CPUSet {
	out := CPUSet{}
	for c := range s {
		out[c] = true
	}
	for c := range o {
		out[c] = true
	}
	return out
}
