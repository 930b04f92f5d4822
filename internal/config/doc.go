// SPDX-License-Identifier: Apache-2.0

// Package config parses and validates sluice's configuration files.
//
// It is pure data and validation: it imports no other sluice package but
// internal/yamldoc (the YAML dialect all of sluice's files share), talks
// to no kernel and looks up no interface. Names stay names; the daemon
// resolves them later and can point back at the file through the Line
// fields kept on each list item.
//
// Every problem in a file is reported, not just the first, as one
// *ValidationErrors whose entries name file:line, the field path, what is
// wrong and the fix. The schema of gateway.yaml is documented in
// docs/gateway-config.md.
package config
