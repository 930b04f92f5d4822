// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"encoding/json"
	"io"
)

// writeJSON is the one --json writer: v, a command's named result type,
// as indented JSON with a "version" field first (the sluice version that
// wrote it, as the daemon's API has), so that a script can tell which
// layout it reads. A document that has its own "version" (sluice version,
// show gateway) keeps it; a list is written as it is.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > 1 && b[0] == '{' && !hasKey(b, "version") {
		ver, _ := json.Marshal(version)
		head := append([]byte(`{"version":`), ver...)
		if string(b) != "{}" {
			head = append(head, ',')
		}
		b = append(head, b[1:]...)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

// emit is a command's output: v through writeJSON with --json, otherwise
// the text that text writes.
func emit(w io.Writer, asJSON bool, v any, text func()) error {
	if asJSON {
		return writeJSON(w, v)
	}
	text()
	return nil
}

// either is yes when cond holds and no otherwise: the two-way words of a
// line of text (both are evaluated).
func either(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}

// errString is err's message for a JSON result's "error" field, "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// hasKey reports whether the JSON object b has the top-level key k.
func hasKey(b []byte, k string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	_, ok := m[k]
	return ok
}
