// SPDX-License-Identifier: Apache-2.0

// Package profiles holds sluice's built-in traffic profiles: data files read
// by 'sluice bench' (internal/bench), embedded into the binary. A profile
// file given by path on the command line uses the same format; see
// docs/bench.md.
package profiles

import "embed"

// FS holds every *.yaml file of this directory.
//
//go:embed *.yaml
var FS embed.FS
