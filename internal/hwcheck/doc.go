// SPDX-License-Identifier: Apache-2.0

// Package hwcheck is the hardware acceptance run (`sluice hwcheck`, issue
// 31): the NIC model's driver scenarios, run on a real port pair cabled
// back to back, measured on the wire and compared with what sluice
// assumes of the driver (internal/driverquirk: the table for the
// driver and kernel, or a model profile).
//
// The ports move into two network namespaces the run creates (the port
// under test in one, its peer in the other) and back at the end, also
// on an error or an interrupt; every SA, policy, XDP program and veth
// lives in those namespaces only. The peer never holds an offloaded SA
// for a transmit scenario, so a capture on it (internal/wire, AF_PACKET)
// sees the frames as they crossed the cable.
//
// One file per scenario (scenario_*.go); row.go is the comparison, which
// the unit tests cover without a NIC; test/vm's TestHWCheckOnModel runs
// the whole command on two NIC model ports.
package hwcheck
