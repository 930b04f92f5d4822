// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Leaf types shared by the config files: each checks its value in
// UnmarshalYAML and reports what is wrong and how to fix it (leafErr).
// yaml.v3 never calls them for a null value: null means "not given".

// flag is a boolean written true or false (YAML 1.2): yaml.v3 would read
// YAML 1.1's yes/no/on/off into a bool, and sluice refuses them.
type flag bool

func (b *flag) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		v := strings.ToLower(n.Value)
		switch {
		case n.ShortTag() == "!!bool" && (v == "true" || v == "false"):
			*b = v == "true"
			return nil
		case n.ShortTag() == "!!str" && (v == "true" || v == "false"):
			return leafErr(n, "%q is quoted, so it is a string; write %s without quotes", n.Value, v)
		}
	}
	return leafErr(n, "want true or false, got %s", kindName(n))
}

// scalar returns n's text, or an error saying what was wanted.
func scalar(n *yaml.Node, what string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", leafErr(n, "want %s, got %s", what, kindName(n))
	}
	return n.Value, nil
}

// rule bounds a num, and may refuse values within the bounds.
type rule interface {
	max() uint64
	refuse(v uint64) string // why v is refused, or ""
}

// upTo is embedded by the rules that refuse nothing within the bounds.
type upTo struct{}

func (upTo) refuse(uint64) string { return "" }

type (
	maxU16   struct{ upTo }
	maxU32   struct{ upTo }
	max100k  struct{ upTo }
	maxRules struct{ upTo }
)

func (maxU16) max() uint64   { return 65535 }
func (maxU32) max() uint64   { return 1<<32 - 1 }
func (max100k) max() uint64  { return 100000 }
func (maxRules) max() uint64 { return MaxFlowerRuleBudget }

// num is a whole number from 0 to R's max that R does not refuse.
type num[R rule] uint64

func (v *num[R]) UnmarshalYAML(n *yaml.Node) error {
	var r R
	u, err := wholeNumber(n, r.max())
	if err != nil {
		return err
	}
	if why := r.refuse(u); why != "" {
		return leafErr(n, "%s", why)
	}
	*v = num[R](u)
	return nil
}

// textRule is what a str must be.
type textRule interface {
	want() string // for "want X, got Y"
	// check returns the value to keep (normalised), or why s is refused.
	check(s string) (keep, why string)
}

// str is a single value (a word or a quoted string) that R accepts.
type str[R textRule] string

func (v *str[R]) UnmarshalYAML(n *yaml.Node) error {
	var r R
	s, err := scalar(n, r.want())
	if err != nil {
		return err
	}
	keep, why := r.check(s)
	if why != "" {
		return leafErr(n, "%s", why)
	}
	*v = str[R](keep)
	return nil
}

// anyText is any single value, as written.
type anyText struct{}

func (anyText) want() string                    { return "a single value (a word or a quoted string)" }
func (anyText) check(s string) (string, string) { return s, "" }

type text = str[anyText]

// nonEmpty is a path or an identity: any single value but "".
type nonEmpty = str[nonEmptyRule]

type nonEmptyRule struct{}

func (nonEmptyRule) want() string { return "a path or an identity" }
func (nonEmptyRule) check(s string) (string, string) {
	if s == "" {
		return "", "is empty; write a value, or remove the key"
	}
	return s, ""
}

// wholeNumber parses a non-negative integer up to limit.
func wholeNumber(n *yaml.Node, limit uint64) (uint64, error) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, leafErr(n, "want a whole number from 0 to %d, got %s", limit, kindName(n))
	}
	s := strings.TrimPrefix(n.Value, "+")
	if strings.HasPrefix(s, "-") {
		return 0, leafErr(n, "%s is negative; use a number from 0 to %d", show(n.Value), limit)
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, leafErr(n, "want a whole number from 0 to %d, got %s", limit, show(n.Value))
	}
	if err != nil || v > limit {
		return 0, leafErr(n, "%s is out of range; use a number from 0 to %d", show(n.Value), limit)
	}
	return v, nil
}

// oneOf sets out to the allowed value n holds. The enum types'
// UnmarshalYAML methods call it; the default, marked in messages, is the
// key's default: tag (markDefault), not an argument here.
func oneOf[T ~string](n *yaml.Node, out *T, allowed ...T) error {
	list := enumList(allowed)
	s, err := scalar(n, "one of "+list)
	if err != nil {
		return err
	}
	for _, a := range allowed {
		if string(a) == s {
			*out = a
			return nil
		}
	}
	return leafErr(n, "%q is not valid; use one of %s", s, list)
}

// enumList lists allowed values for messages ("a, b or c").
func enumList[T ~string](allowed []T) string {
	parts := make([]string, len(allowed))
	for i, a := range allowed {
		parts[i] = string(a)
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
}

// ifname is a Linux interface name.
type ifname = str[ifnameRule]

type ifnameRule struct{}

func (ifnameRule) want() string                    { return "a Linux interface name such as p0" }
func (ifnameRule) check(s string) (string, string) { return s, ifnameProblem(s) }

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
