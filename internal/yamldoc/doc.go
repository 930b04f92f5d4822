// SPDX-License-Identifier: Apache-2.0

// Package yamldoc is the one YAML dialect of sluice's files: gateway.yaml
// and host.yaml (internal/config), tune.yaml (internal/tune) and traffic
// profiles (internal/bench) are read the same way.
//
// A file is decoded into a file struct: each key is a field with a
// `yaml:"name"` tag (and `default:`, `what:` and `example:` tags: its
// default, and how messages name its entries and show its keys), and each
// value is a leaf type whose UnmarshalYAML checks it (leaf.go). A map
// field takes keys the file chooses (sysctl names, interface names). The
// walk (schema.go) refuses unknown keys with "did you mean", reports keys
// set twice, expands merge keys within a budget, and fills in defaults;
// Fill (fill.go) copies the decoded struct into the type the rest of
// sluice uses.
//
// Every problem in a file is reported, not just the first, as one
// *ValidationErrors whose entries read "file:line: field: what is wrong;
// the fix". It imports nothing of sluice.
package yamldoc
