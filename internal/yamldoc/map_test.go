// SPDX-License-Identifier: Apache-2.0

package yamldoc

import (
	"reflect"
	"strings"
	"testing"
)

// A schema with what config's files lack and tune.yaml and traffic
// profiles need: a map whose keys the file chooses, a Float, a count
// that starts at 1 (From1).
type (
	mapFile struct {
		Entries map[string]*mapEntryFile `yaml:"entries" example:"a: {weight: 1}"`
	}
	mapEntryFile struct {
		Weight Float           `yaml:"weight"`
		Count  Num[upToNine]   `yaml:"count" default:"3"`
		Tags   map[string]Flag `yaml:"tags"`
	}
	upToNine struct{ From1 }

	mapDoc   struct{ Entries map[string]*mapEntry }
	mapEntry struct {
		Weight float64
		Count  int
		Tags   map[string]bool
		Line   int
	}
)

func (upToNine) Max() uint64 { return 9 }

func readMapDoc(t *testing.T, text string) (*mapDoc, error) {
	t.Helper()
	p := New("f.yaml", len(text))
	var f mapFile
	d := &mapDoc{}
	p.Read([]byte(text), "entries:", "entries:", &f, d)
	return d, p.Result()
}

// Map values merge, take their keys' defaults and get their line, as
// list entries do.
func TestMapEntriesMergeDefaultAndKeepTheirLine(t *testing.T) {
	d, err := readMapDoc(t, "entries:\n  a: &a {weight: 0.5, tags: {x: true}}\n  b: {<<: *a, count: 2}\n")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*mapEntry{
		"a": {Weight: 0.5, Count: 3, Tags: map[string]bool{"x": true}, Line: 2},
		"b": {Weight: 0.5, Count: 2, Tags: map[string]bool{"x": true}, Line: 3},
	}
	if !reflect.DeepEqual(d.Entries, want) {
		t.Fatalf("entries %+v %+v, want %+v %+v", d.Entries["a"], d.Entries["b"], want["a"], want["b"])
	}
}

func TestMapAndNumberErrors(t *testing.T) {
	_, err := readMapDoc(t, "entries:\n  a: {weight: .inf, count: 0}\n  b:\n  a: {weight: 1}\n  c: {weight: -2, tags: {y: yes}}\n")
	want := []string{
		`f.yaml:2: entries.a.weight: .inf is not a finite number of 0 or more; write one such as 1 or 0.5`,
		`f.yaml:2: entries.a.count: 0 is out of range; use a number from 1 to 9`,
		`f.yaml:3: entries.b: has no value; give it one (such as a: {weight: 1}), or remove the key`,
		`f.yaml:4: entries.a: set twice (first on line 2); keep one`,
		`f.yaml:5: entries.c.weight: -2 is not a finite number of 0 or more; write one such as 1 or 0.5`,
		`f.yaml:5: entries.c.tags.y: want true or false, got the string "yes"`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Fatalf("errors:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}
