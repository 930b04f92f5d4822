// SPDX-License-Identifier: Apache-2.0

// Package driverquirk is what sluice knows of how IPsec offload drivers
// differ from the kernel's software XFRM: one table (table.go), each row
// a driver, a kernel range, a behaviour, the source it was read in and the
// fix. The gateway, plan/apply, verify and doctor read it through For.
//
// Vendor kernels backport fixes (and regressions), so a row is a prior,
// not proof: `sluice verify --traffic` probes the live device where a
// behaviour can be shown with packets. The NIC model (kmod/nicmodel)
// stands for a driver through its `profile` module parameter (model.go).
//
// A leaf: it imports nothing of sluice, so every part can share it.
package driverquirk
