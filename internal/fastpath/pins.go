// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"

	"github.com/cilium/ebpf"
)

// pinned is one object the daemon keeps pinned: a map or an XDP link.
type pinned interface {
	Pin(string) error
	Unpin() error
}

// pins lists what the daemon pins under pinDir, by file name: the maps
// Load pinned by name, and the links Attach pinned.
func (dp *Datapath) pins() map[string]pinned {
	out := map[string]pinned{}
	v := reflect.ValueOf(&dp.objs.fastpathMaps).Elem()
	for i := 0; i < v.NumField(); i++ {
		m, ok := v.Field(i).Interface().(*ebpf.Map)
		if ok && m != nil && m.IsPinned() {
			out[v.Type().Field(i).Tag.Get("ebpf")] = m
		}
	}
	dp.linksMu.Lock()
	for name, l := range dp.links {
		out[linkPinPrefix+name] = l
	}
	dp.linksMu.Unlock()
	return out
}

// MissingPins names the pins that are gone from pinDir (someone removed
// them, or the whole directory).
func (dp *Datapath) MissingPins(pinDir string) []string {
	var missing []string
	for name := range dp.pins() {
		if _, err := os.Lstat(filepath.Join(pinDir, name)); errors.Is(err, os.ErrNotExist) {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	return missing
}

// RepairPins pins what is missing from pinDir, which the caller created
// again if needed (and checked: internal/gateway). The daemon holds every
// object open, so nothing was detached meanwhile; the pins are what lets
// `gateway explain|stop` and the next daemon find them.
func (dp *Datapath) RepairPins(pinDir string) error {
	var errs []error
	for name, p := range dp.pins() {
		path := filepath.Join(pinDir, name)
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			continue
		}
		// Unpin forgets the old path (the file is gone), so that Pin
		// does not take the same path for "already pinned".
		if err := p.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		if err := p.Pin(path); err != nil {
			errs = append(errs, fmt.Errorf("pinning %s: %w", path, err))
		}
	}
	return errors.Join(errs...)
}
