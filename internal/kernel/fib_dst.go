// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// defaultRules are the IPv4 policy rules a namespace starts with
// (priority: table): local, main, default.
var defaultRules = map[int]int{0: unix.RT_TABLE_LOCAL, 32766: unix.RT_TABLE_MAIN, 32767: unix.RT_TABLE_DEFAULT}

// FIBByDestination reports whether the IPv4 FIB of the calling thread's
// namespace answers a forwarded packet from its ingress device, destination
// and TOS alone, and if not, why. That holds while the policy rules are the
// three default ones (a rule may select on source, mark, ports, interfaces)
// and no route has several next hops (the multipath hash reads the source,
// and may read ports). The fast path reuses the FIB's answers per
// destination (fib_cache in bpf/fastpath.c) only while this says yes. When
// rules or routes cannot be read it answers no: the safe way to be wrong.
func FIBByDestination() (bool, string) {
	// A route through a next-hop group lists the group's members as next
	// hops only in compat mode (the default, 1); with 0 it would look like
	// a single next hop here.
	if b, err := os.ReadFile("/proc/sys/net/ipv4/nexthop_compat_mode"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return false, "net.ipv4.nexthop_compat_mode is 0 (next-hop groups are not visible in route dumps)"
	}
	rules, err := netlink.RuleList(netlink.FAMILY_V4)
	if err != nil {
		return false, "cannot list policy rules: " + err.Error()
	}
	for _, r := range rules {
		if table, ok := defaultRules[r.Priority]; !ok || table != r.Table || !plainRule(r) {
			return false, fmt.Sprintf("policy rule priority %d (table %d) is not one of the default ones", r.Priority, r.Table)
		}
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return false, "cannot list routes: " + err.Error()
	}
	for _, r := range routes {
		if len(r.MultiPath) > 0 {
			return false, fmt.Sprintf("route to %v (table %d) has %d next hops", r.Dst, r.Table, len(r.MultiPath))
		}
	}
	return true, ""
}

// plainRule says whether r selects nothing but "every packet" and looks
// up its table, as the default rules do.
func plainRule(r netlink.Rule) bool {
	return r.Src == nil && r.Dst == nil && r.IifName == "" && r.OifName == "" && r.Mark == 0 &&
		r.Mask == nil && r.Tos == 0 && r.TunID == 0 && r.Goto <= 0 && r.Flow <= 0 && !r.Invert &&
		r.Dport == nil && r.Sport == nil && r.IPProto == 0 && r.UIDRange == nil &&
		r.SuppressIfgroup <= 0 && r.SuppressPrefixlen <= 0 && (r.Type == 0 || r.Type == unix.FR_ACT_TO_TBL)
}
