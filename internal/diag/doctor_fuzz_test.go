// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzDoctorFacts reads facts as `doctor --facts FILE` does and diagnoses
// them: whatever JSON decodes must give a report (or a clear error), never
// a panic, and the same diagnosis after a JSON round trip of the facts.
//
//	go test -run '^$' -fuzz '^FuzzDoctorFacts$' -fuzztime 30s ./internal/diag/
func FuzzDoctorFacts(f *testing.F) {
	b, _ := json.Marshal(healthy())
	f.Add(b)
	f.Add([]byte(`{"netdevs":[{"name":"bond0","kind":"bond","bond_mode":"active-backup"}],"states":[{}],"kernel":null}`))
	f.Add([]byte(`{"firmware":{"x":{"NUM_OF_VFS":"(("}},"devlink":[{}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var facts Facts
		if err := json.Unmarshal(b, &facts); err != nil {
			return
		}
		r1, err := Diagnose(&facts, DoctorOptions{})
		if err != nil {
			return
		}
		t1 := reportJSON(t, r1)
		out, err := json.Marshal(&facts)
		if err != nil {
			t.Fatal(err)
		}
		var back Facts
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatal(err)
		}
		r2, err := Diagnose(&back, DoctorOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if t2 := reportJSON(t, r2); t1 != t2 {
			t.Fatalf("diagnosis changed through JSON:\n%s\n---\n%s", t1, t2)
		}
	})
}

// FuzzParseFirmwareQuery checks the `mstconfig q` reader: no panic, and
// every value it keeps is one printed token.
//
//	go test -run '^$' -fuzz '^FuzzParseFirmwareQuery$' -fuzztime 30s ./internal/diag/
func FuzzParseFirmwareQuery(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "mstconfig-q.txt"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(b))
	f.Add("Configurations:   Next Boot  Current\n        SRIOV_EN      True(1)     False(0)\n")
	f.Add("Configurations:\n        SRIOV_EN     \u00a0\n") // \S matches U+00A0; strings.Fields does not
	f.Fuzz(func(t *testing.T, out string) {
		for k, v := range ParseFirmwareQuery(out) {
			if k == "" || v == "" || len(strings.Fields(v)) != 1 {
				t.Fatalf("%q = %q", k, v)
			}
			fwNumber(v)
		}
	})
}
