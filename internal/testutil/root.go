// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"os"
	"testing"
)

// RequireRoot skips tb unless it runs as root. why says what needs root
// ("creates network namespaces"), so a skipped run tells the reader what
// was not tested. Skip only where the feature truly cannot run unprivileged.
func RequireRoot(tb testing.TB, why string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: " + why)
	}
}
