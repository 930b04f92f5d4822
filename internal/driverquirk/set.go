// SPDX-License-Identifier: Apache-2.0

package driverquirk

import "fmt"

// Set is what the table says of one driver on one kernel.
type Set struct {
	// Driver and Release are what was asked; As is the driver and
	// version the rows were chosen for (the NIC model's profile stands
	// for mlx5_core at a version).
	Driver, Release, As string
	entries             []Entry
}

// For returns the rows for driver (as `ethtool -i` names it) on the
// kernel release (uname -r), with the XFRM core's rows for that release.
// An unparsable release matches every row of the driver: a prior errs
// towards warning.
func For(driver, kernelRelease string) Set {
	return forAs(driver, kernelRelease, driver, kernelRelease, kernelRelease)
}

// forAs picks driver rows as driverAs at driverRelease and core rows at
// coreRelease (the kernel actually running).
func forAs(driver, release, driverAs, driverRelease, coreRelease string) Set {
	s := Set{Driver: driver, Release: release, As: driverAs + " " + driverRelease}
	dv, dok := ParseRelease(driverRelease)
	cv, cok := ParseRelease(coreRelease)
	for _, e := range Table {
		switch {
		case e.Driver == AnyDriver && (!cok || e.covers(cv)):
		case e.Driver != AnyDriver && driverAs != "" && e.Driver == driverAs && (!dok || e.covers(dv)):
		default:
			continue
		}
		if !s.Has(e.Behaviour) {
			s.entries = append(s.entries, e)
		}
	}
	return s
}

func (e Entry) covers(v Version) bool {
	return !v.Less(e.From) && (e.Until.IsZero() || v.Less(e.Until))
}

// Has reports whether the driver on this kernel shows b.
func (s Set) Has(b Behaviour) bool {
	_, ok := s.Get(b)
	return ok
}

// Get returns the row for b.
func (s Set) Get(b Behaviour) (Entry, bool) {
	for _, e := range s.entries {
		if e.Behaviour == b {
			return e, true
		}
	}
	return Entry{}, false
}

// Entries returns the rows that apply, in table order.
func (s Set) Entries() []Entry { return append([]Entry(nil), s.entries...) }

// Merge adds t's rows that s lacks (a bond's ports, for example).
func (s Set) Merge(t Set) Set {
	out := s
	out.entries = s.Entries()
	for _, e := range t.entries {
		if !out.Has(e.Behaviour) {
			out.entries = append(out.entries, e)
		}
	}
	return out
}

// Without returns s less b's row: what a device's own switch turns off
// (the NIC model's tx_miss_cleartext, see ForDevice).
func (s Set) Without(b Behaviour) Set {
	out := s
	out.entries = nil
	for _, e := range s.entries {
		if e.Behaviour != b {
			out.entries = append(out.entries, e)
		}
	}
	return out
}

// Range prints the row's kernel range.
func (e Entry) Range() string {
	if e.Until.IsZero() {
		return fmt.Sprintf("%s and later (no fix known)", e.From)
	}
	return fmt.Sprintf("%s up to %s", e.From, e.Until)
}
