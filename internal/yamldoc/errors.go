// SPDX-License-Identifier: Apache-2.0

package yamldoc

import (
	"sort"
	"strconv"
	"strings"
)

// FieldError is one problem in a file: where it is, which field,
// what is wrong and how to fix it.
type FieldError struct {
	// File is the name the file was read under (given to New).
	File string
	// Line is 1-based; 0 when the YAML parser reported no position.
	Line int
	// Path is the field, such as "interfaces[1].inbound" (list indexes
	// count from 0); empty when the problem is the whole document.
	Path string
	// Msg says what is wrong and how to fix it.
	Msg string
}

// Error formats the problem as "file:line: path: message".
func (e *FieldError) Error() string {
	s := e.File
	if e.Line > 0 {
		s += ":" + strconv.Itoa(e.Line)
	}
	if e.Path != "" {
		s += ": " + e.Path
	}
	return s + ": " + e.Msg
}

// ValidationErrors is every problem found in one file, sorted by line.
type ValidationErrors struct {
	Errors []*FieldError
}

// Error prints one problem per line, sorted by line.
func (v *ValidationErrors) Error() string {
	lines := make([]string, len(v.Errors))
	for i, e := range v.Errors {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the individual problems, so errors.As can find a
// *FieldError.
func (v *ValidationErrors) Unwrap() []error {
	out := make([]error, len(v.Errors))
	for i, e := range v.Errors {
		out[i] = e
	}
	return out
}

// newValidationErrors sorts errs by line (keeping discovery order within a
// line) and returns nil when there are none.
func newValidationErrors(errs []*FieldError) *ValidationErrors {
	if len(errs) == 0 {
		return nil
	}
	sorted := append([]*FieldError(nil), errs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Line < sorted[j].Line })
	return &ValidationErrors{Errors: sorted}
}
