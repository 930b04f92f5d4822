// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"flag"
	"path/filepath"
	"testing"

	"sluice/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/golden")

// cx7 is the ConnectX-7 benchmark's gateway (see testdata/gen_cx7.go).
const cx7 = "testdata/cx7"

// golden compares got with testdata/golden/name, or rewrites it with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata/golden", name), got, *update)
}
