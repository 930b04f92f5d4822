// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"encoding/json"
	"fmt"
)

// Verdict grades one finding. The order matters: a report's overall verdict
// is its worst finding's.
type Verdict int

const (
	Skip Verdict = iota // could not be checked here (says why)
	OK
	Info // worth knowing, nothing to fix
	Warn // works, but slower or fragile
	Fail // broken, or will break
)

var verdictNames = [...]string{Skip: "skip", OK: "ok", Info: "info", Warn: "warn", Fail: "fail"}
var verdictTags = [...]string{Skip: "[SKIP]", OK: "[ OK ]", Info: "[INFO]", Warn: "[WARN]", Fail: "[FAIL]"}

func (v Verdict) String() string { return verdictNames[v] }

// Tag is the bracketed label of text output ("[ OK ]", "[WARN]"...).
func (v Verdict) Tag() string { return verdictTags[v] }

func (v Verdict) MarshalJSON() ([]byte, error) { return json.Marshal(v.String()) }

func (v *Verdict) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	for i, n := range verdictNames {
		if n == s {
			*v = Verdict(i)
			return nil
		}
	}
	return fmt.Errorf("unknown verdict %q (want skip, ok, info, warn or fail)", s)
}

// Finding is one line of a diagnostic.
type Finding struct {
	Verdict Verdict `json:"verdict"`
	// Subject is the interface, CPU or IRQ the finding is about ("" for
	// the host as a whole).
	Subject string `json:"subject,omitempty"`
	Message string `json:"message"`
}

// worst returns the most severe verdict among fs (OK for none).
func worst(fs []Finding) Verdict {
	w := OK
	for _, f := range fs {
		if f.Verdict > w {
			w = f.Verdict
		}
	}
	return w
}
