// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
)

// FIBUsesL4 reports whether the FIB of the calling thread's network
// namespace may pick a route by protocol or ports, and why: a policy rule
// that matches ipproto, sport or dport, or a multipath hash policy that
// hashes on ports (1: L4, 3: custom fields). The fast path's flow cache
// keys on protocol and ports exactly when this (or a policy) says so.
// When the rules cannot be read it answers yes: the safe way to be wrong.
func FIBUsesL4() (bool, string) {
	for _, fam := range []string{"ipv4", "ipv6"} {
		b, err := os.ReadFile("/proc/sys/net/" + fam + "/fib_multipath_hash_policy")
		if err != nil {
			continue // IPv6 disabled: nothing to hash
		}
		switch v := strings.TrimSpace(string(b)); v {
		case "0", "2": // L3, L3 or inner L3
		default:
			return true, fmt.Sprintf("net.%s.fib_multipath_hash_policy is %s (hashes ports)", fam, v)
		}
	}
	rules, err := netlink.RuleList(netlink.FAMILY_ALL)
	if err != nil {
		return true, "cannot list policy rules: " + err.Error()
	}
	for _, r := range rules {
		if r.IPProto != 0 || r.Sport != nil || r.Dport != nil {
			return true, fmt.Sprintf("policy rule priority %d matches ipproto/sport/dport", r.Priority)
		}
	}
	return false, ""
}
