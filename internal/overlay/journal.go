// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sluice/internal/fileread"
	"sluice/internal/kernel"
)

// The journal records what apply created and what it changed (with the
// value before), so teardown removes exactly what the file created and
// puts back what it changed. It lives in /run (tmpfs): after a reboot
// everything apply did is gone too. One journal per overlay name and
// network namespace. It never holds key material.

// DefaultStateDir is where journals live.
const DefaultStateDir = "/run/sluice/overlay"

const (
	kindLink     = "link"
	kindAddr     = "addr"
	kindRoute    = "route"
	kindSA       = "sa"
	kindPolicy   = "policy"
	kindMTU      = "mtu"
	kindUp       = "up"
	kindMaster   = "master"
	kindMIIMon   = "miimon"
	kindFeature  = "feature"
	kindNumVFs   = "numvfs"
	kindEswitch  = "eswitch"
	kindParam    = "param"
	kindVF       = "vf"
	kindCaps     = "caps"
	kindPrivFlag = "privflag"
)

// entry is one journal record. Which fields are set depends on Kind.
type entry struct {
	Kind   string `json:"kind"`
	Link   string `json:"link,omitempty"`
	Prefix string `json:"prefix,omitempty"`
	Via    string `json:"via,omitempty"`
	Src    string `json:"src,omitempty"`
	Dst    string `json:"dst,omitempty"`
	SPI    uint32 `json:"spi,omitempty"`
	Dir    string `json:"dir,omitempty"`
	Name   string `json:"name,omitempty"`
	Handle string `json:"handle,omitempty"`
	VF     int    `json:"vf,omitempty"`
	Old    string `json:"old,omitempty"`
	New    string `json:"new,omitempty"`
	OldUp  bool   `json:"old_up,omitempty"`
	OldMTU int    `json:"old_mtu,omitempty"`
}

// id identifies the object or attribute an entry is about.
func (e entry) id() string {
	return strings.Join([]string{e.Kind, e.Link, e.Prefix, e.Dst, fmt.Sprint(e.SPI), e.Dir, e.Src, e.Name, e.Handle, fmt.Sprint(e.VF)}, "|")
}

// Journal is the record of one overlay's applies on one namespace.
type Journal struct {
	Name    string  `json:"name"`
	File    string  `json:"file"`
	Netns   string  `json:"netns"`
	Created []entry `json:"created"`
	Changed []entry `json:"changed"`
	path    string
}

// netnsID names the calling thread's network namespace by its cookie
// (SO_NETNS_COOKIE), never reused during a boot. The inode is only the
// fallback for a kernel without cookies: inodes are reused once a namespace
// is gone, and a new namespace would inherit a dead one's journal (teardown
// then replays steps for links that never existed there) and its key ledger.
func netnsID() string {
	if c, err := kernel.NetnsCookie(); err == nil {
		return fmt.Sprintf("cookie-%d", c)
	}
	l, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSuffix(strings.TrimPrefix(l, "net:["), "]")
}

// JournalPath is where the journal of overlay name lives in dir for the
// calling thread's network namespace.
func JournalPath(dir, name string) string {
	return filepath.Join(dir, fmt.Sprintf("%s@netns-%s.json", name, netnsID()))
}

// LoadJournal reads the journal, or returns an empty one (exists false).
func LoadJournal(dir, name, file string) (j *Journal, exists bool, err error) {
	p := JournalPath(dir, name)
	j = &Journal{Name: name, File: file, Netns: netnsID(), path: p}
	b, err := fileread.Read(p, fileread.StateLimit)
	if errors.Is(err, os.ErrNotExist) {
		return j, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("journal %s: %w", p, err)
	}
	if err := json.Unmarshal(b, j); err != nil {
		return nil, false, fmt.Errorf("journal %s: %w (delete it to start afresh; teardown then removes what the file declares)", p, err)
	}
	j.path = p
	return j, true, nil
}

// save writes the journal atomically (0600: it names devices and SPIs).
func (j *Journal) save() error {
	if err := os.MkdirAll(filepath.Dir(j.path), 0o700); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	tmp := j.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return os.Rename(tmp, j.path)
}

// remove deletes the journal file.
func (j *Journal) remove() error {
	if err := os.Remove(j.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (j *Journal) addCreated(e entry) {
	for _, x := range j.Created {
		if x.id() == e.id() {
			return
		}
	}
	j.Created = append(j.Created, e)
}

// addChanged keeps the oldest value: a second apply that changes the same
// attribute again must not forget what it was before the first.
func (j *Journal) addChanged(e entry) {
	for _, x := range j.Created {
		if (e.Link != "" && x.Kind == kindLink && x.Link == e.Link) || (x.Kind == e.Kind && x.id() == e.id()) {
			return // the object is ours: teardown deletes it
		}
	}
	for i, x := range j.Changed {
		if x.id() == e.id() {
			j.Changed[i].New = e.New
			return
		}
	}
	j.Changed = append(j.Changed, e)
}

func (j *Journal) created(kind string, match func(entry) bool) bool {
	for _, x := range j.Created {
		if x.Kind == kind && match(x) {
			return true
		}
	}
	return false
}

func (j *Journal) dropCreated(e entry) {
	out := j.Created[:0]
	for _, x := range j.Created {
		if x.id() != e.id() {
			out = append(out, x)
		}
	}
	j.Created = out
}
