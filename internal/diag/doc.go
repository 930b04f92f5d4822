// SPDX-License-Identifier: Apache-2.0

// Package diag answers "is this host laid out and configured for fast
// IPsec?": the PCI/NUMA topology of its network devices, where each RX
// queue's interrupt lands, and doctor checks that each give a verdict, the
// evidence and the fix.
//
// Everything read from sysfs and procfs goes through an FS with a root
// directory, so the same code runs against the live host (Root "/") and
// against fixture trees in testdata/ modelled on real machines. Netlink,
// ethtool and devlink are reached only through internal/kernel.
package diag
