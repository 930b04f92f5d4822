// SPDX-License-Identifier: Apache-2.0

// Package wire is what crossed a wire, seen by a capture (AF_PACKET on the
// far port) and classified here: ESP, cleartext IP, link control or
// non-IP. It never reads a NIC's or the NIC model's own counters: a leak
// measured by the device's counters lets the device grade itself.
//
// Two users: the tests' wire oracle (internal/testutil, WireOracle) and
// `sluice hwcheck` (internal/hwcheck), which measures a real port pair
// with the same classifier, so the model and the hardware are judged
// alike.
package wire
