// SPDX-License-Identifier: Apache-2.0

package yamldoc

import (
	"errors"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Leaf types shared by sluice's files: each checks its value in
// UnmarshalYAML and reports what is wrong and how to fix it (LeafErr).
// yaml.v3 never calls them for a null value: null means "not given".

// Flag is a boolean written true or false (YAML 1.2): yaml.v3 would read
// YAML 1.1's yes/no/on/off into a bool, and sluice refuses them.
type Flag bool

func (b *Flag) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		v := strings.ToLower(n.Value)
		switch {
		case n.ShortTag() == "!!bool" && (v == "true" || v == "false"):
			*b = v == "true"
			return nil
		case n.ShortTag() == "!!str" && (v == "true" || v == "false"):
			return LeafErr(n, "%q is quoted, so it is a string; write %s without quotes", n.Value, v)
		}
	}
	return LeafErr(n, "want true or false, got %s", KindName(n))
}

// Scalar returns n's text, or an error saying what was wanted.
func Scalar(n *yaml.Node, what string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", LeafErr(n, "want %s, got %s", what, KindName(n))
	}
	return n.Value, nil
}

// Rule bounds a Num, and may refuse values within the bounds.
type Rule interface {
	Max() uint64
	Refuse(v uint64) string // why v is refused, or ""
}

// UpTo is embedded by the rules that refuse nothing within the bounds.
type UpTo struct{}

func (UpTo) Refuse(uint64) string { return "" }

// MaxU16 and MaxU32 bound a Num to 16 and 32 bits.
type (
	MaxU16 struct{ UpTo }
	MaxU32 struct{ UpTo }
)

func (MaxU16) Max() uint64 { return 65535 }
func (MaxU32) Max() uint64 { return 1<<32 - 1 }

// From1 is embedded by the rules of counts and ports, where 0 means
// nothing: their numbers start at 1.
type From1 struct{ UpTo }

func (From1) Min() uint64 { return 1 }

// Num is a whole number from 0 (or R's Min, when it has one) to R's max
// that R does not refuse.
type Num[R Rule] uint64

func (v *Num[R]) UnmarshalYAML(n *yaml.Node) error {
	var r R
	lo := uint64(0)
	if m, ok := any(r).(interface{ Min() uint64 }); ok {
		lo = m.Min()
	}
	u, err := wholeNumber(n, lo, r.Max())
	if err != nil {
		return err
	}
	if why := r.Refuse(u); why != "" {
		return LeafErr(n, "%s", why)
	}
	*v = Num[R](u)
	return nil
}

// TextRule is what a Str must be.
type TextRule interface {
	Want() string // for "want X, got Y"
	// check returns the value to keep (normalised), or why s is refused.
	Check(s string) (keep, why string)
}

// Str is a single value (a word or a quoted string) that R accepts.
type Str[R TextRule] string

func (v *Str[R]) UnmarshalYAML(n *yaml.Node) error {
	var r R
	s, err := Scalar(n, r.Want())
	if err != nil {
		return err
	}
	keep, why := r.Check(s)
	if why != "" {
		return LeafErr(n, "%s", why)
	}
	*v = Str[R](keep)
	return nil
}

// AnyText is any single value, as written.
type AnyText struct{}

func (AnyText) Want() string                    { return "a single value (a word or a quoted string)" }
func (AnyText) Check(s string) (string, string) { return s, "" }

// Text is any single value, as written.
type Text = Str[AnyText]

// NonEmpty is a path or an identity: any single value but "".
type NonEmpty = Str[NonEmptyRule]

// NonEmptyRule refuses "".
type NonEmptyRule struct{}

func (NonEmptyRule) Want() string { return "a path or an identity" }
func (NonEmptyRule) Check(s string) (string, string) {
	if s == "" {
		return "", "is empty; write a value, or remove the key"
	}
	return s, ""
}

// WholeNumber parses a non-negative integer up to limit.
func WholeNumber(n *yaml.Node, limit uint64) (uint64, error) { return wholeNumber(n, 0, limit) }

// wholeNumber parses an integer from lo to hi.
func wholeNumber(n *yaml.Node, lo, hi uint64) (uint64, error) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, LeafErr(n, "want a whole number from %d to %d, got %s", lo, hi, KindName(n))
	}
	s := strings.TrimPrefix(n.Value, "+")
	if strings.HasPrefix(s, "-") {
		return 0, LeafErr(n, "%s is negative; use a number from %d to %d", Show(n.Value), lo, hi)
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, LeafErr(n, "want a whole number from %d to %d, got %s", lo, hi, Show(n.Value))
	}
	if err != nil || v < lo || v > hi {
		return 0, LeafErr(n, "%s is out of range; use a number from %d to %d", Show(n.Value), lo, hi)
	}
	return v, nil
}

// OneOf sets out to the allowed value n holds. The enum types'
// UnmarshalYAML methods call it; the default, marked in messages, is the
// key's default: tag (markDefault), not an argument here.
func OneOf[T ~string](n *yaml.Node, out *T, allowed ...T) error {
	list := enumList(allowed)
	s, err := Scalar(n, "one of "+list)
	if err != nil {
		return err
	}
	for _, a := range allowed {
		if string(a) == s {
			*out = a
			return nil
		}
	}
	return LeafErr(n, "%q is not valid; use one of %s", s, list)
}

// EnumList lists allowed values for messages ("a, b or c").
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

// Float is a finite number, not negative (a weight, a rate): written as
// a whole number or with a fraction, never .nan or .inf.
type Float float64

func (v *Float) UnmarshalYAML(n *yaml.Node) error {
	var f float64
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") || n.Decode(&f) != nil {
		return LeafErr(n, "want a number such as 1 or 0.5, got %s", KindName(n))
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return LeafErr(n, "%s is not a finite number of 0 or more; write one such as 1 or 0.5", Show(n.Value))
	}
	*v = Float(f)
	return nil
}
