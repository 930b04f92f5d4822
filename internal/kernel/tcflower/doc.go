// SPDX-License-Identifier: Apache-2.0

// Package tcflower installs, removes and dumps tc flower filters, the
// gateway's hardware tier: the request encoding (vishvananda/netlink's
// flower lacks the keys and actions the tier needs), a socket that sends
// them in batches with a bounded window of outstanding acks, dumps with
// each filter's counters, and the clsact qdisc they hang from.
package tcflower
