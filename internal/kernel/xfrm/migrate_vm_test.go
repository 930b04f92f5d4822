//go:build vmtest

// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"testing"

	"sluice/internal/testutil"
)

// TestVMMonitorMigrateMovesSA is TestMonitorMigrateResyncs with an ESP SA,
// which the host kernel cannot hold: xfrm_migrate() replaces the SA with a
// copy to the new peer and deletes the old one, announced only on the
// MIGRATE group, and the watch must resync.
func TestVMMonitorMigrateMovesSA(t *testing.T) {
	testutil.RequireVM(t)
	ns, h := testutil.NewNetNS(t)
	testMonitorMigrate(t, ns, h, true)
}
