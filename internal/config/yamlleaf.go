// SPDX-License-Identifier: Apache-2.0

package config

import (
	"net/netip"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Leaf types of gateway.yaml and host.yaml; the generic ones (flag, num,
// str, oneOf ...) are yamldoc's, named here in yamldoc.go.

type (
	max100k  struct{ upTo }
	maxRules struct{ upTo }
)

func (max100k) Max() uint64  { return 100000 }
func (maxRules) Max() uint64 { return MaxFlowerRuleBudget }

// ifname is a Linux interface name.
type ifname = str[ifnameRule]

type ifnameRule struct{}

func (ifnameRule) Want() string                    { return "a Linux interface name such as p0" }
func (ifnameRule) Check(s string) (string, string) { return s, ifnameProblem(s) }

// ipAddr is an IP address (IPv4 or IPv6, no zone, not unspecified, not
// IPv4-mapped).
type ipAddr netip.Addr

func (a *ipAddr) UnmarshalYAML(n *yaml.Node) error {
	s, err := scalar(n, "an IP address")
	if err != nil {
		return err
	}
	v, perr := netip.ParseAddr(s)
	switch {
	case perr != nil:
		return leafErr(n, "%q is not an IP address; write one such as 192.0.2.1 or 2001:db8::1", s)
	case v.Zone() != "":
		return leafErr(n, "%q has an IPv6 zone; remove %%%s (the interface is known from the rest of the file)", s, show(v.Zone()))
	case v.IsUnspecified():
		return leafErr(n, "%s is the unspecified address; write the address of a host", s)
	case v.Is4In6():
		return leafErr(n, "%s", mappedMsg(s, v))
	}
	*a = ipAddr(v)
	return nil
}

// ipPrefix is a selector prefix; a bare address is a /32 or /128.
type ipPrefix netip.Prefix

func (p *ipPrefix) UnmarshalYAML(n *yaml.Node) error {
	s, err := scalar(n, "a prefix such as 10.0.0.0/8")
	if err != nil {
		return err
	}
	const bad = "%q is not an IP prefix; write one such as 10.0.0.0/8 or 2001:db8::/32, or a bare address for one host"
	if strings.Contains(s, "/") {
		v, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			return leafErr(n, bad, s)
		case v != v.Masked():
			return leafErr(n, "%q has bits set after the /%d; write %s", s, v.Bits(), v.Masked())
		case v.Addr().Is4In6():
			return leafErr(n, "%s", mappedMsg(s, v.Addr()))
		}
		*p = ipPrefix(v)
		return nil
	}
	a, perr := netip.ParseAddr(s)
	switch {
	case perr != nil:
		return leafErr(n, bad, s)
	case a.Zone() != "":
		return leafErr(n, "%q has an IPv6 zone; selectors have none: remove %%%s", s, show(a.Zone()))
	case a.Is4In6():
		return leafErr(n, "%s", mappedMsg(s, a))
	}
	*p = ipPrefix(netip.PrefixFrom(a, a.BitLen()))
	return nil
}
