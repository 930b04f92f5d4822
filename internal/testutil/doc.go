// SPDX-License-Identifier: Apache-2.0

// Package testutil holds the helpers that tests of every package share, as
// cilium/ebpf's internal/testutils does: RequireRoot, which skips a test that
// needs privileges and says what for, and NewNetNS, a uniquely named network
// namespace removed when the test ends; CopyTree, WriteFiles and Golden, for
// tests that read a committed sysfs/procfs tree and compare golden text. It
// is imported by tests only.
package testutil
