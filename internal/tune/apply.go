// SPDX-License-Identifier: Apache-2.0

package tune

import (
	"fmt"
	"strings"
)

// Drift returns the items whose live value differs from the profile's.
func Drift(items []Item) []Item {
	var out []Item
	for _, it := range items {
		if it.Drift() {
			out = append(out, it)
		}
	}
	return out
}

// Apply changes every drifted item that may be changed, then reads the host
// again (twice: channel changes create new IRQs to pin) and returns the
// items that still differ. Items apply in order; the first error stops
// nothing: every item is tried and all errors are returned together.
func (h *Host) Apply(p *Profile) (changed []Item, remaining []Item, err error) {
	var errs []string
	for pass := 0; pass < 2; pass++ {
		items, err := h.Collect(p)
		if err != nil {
			return changed, nil, err
		}
		for _, it := range Drift(items) {
			if it.ReportOnly || it.apply == nil {
				continue
			}
			if err := it.apply(); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", it.Key, err))
				continue
			}
			changed = append(changed, it)
		}
	}
	items, err := h.Collect(p)
	if err != nil {
		return changed, nil, err
	}
	remaining = Drift(items)
	if len(errs) > 0 {
		return changed, remaining, fmt.Errorf("apply: %s", strings.Join(errs, "; "))
	}
	return changed, remaining, nil
}

// NotApplicable returns the items that do not apply here.
func NotApplicable(items []Item) []Item {
	var out []Item
	for _, it := range items {
		if it.NotApplicable != "" {
			out = append(out, it)
		}
	}
	return out
}
