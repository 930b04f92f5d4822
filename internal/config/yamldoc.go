// SPDX-License-Identifier: Apache-2.0

package config

import (
	"go.yaml.in/yaml/v3"

	"sluice/internal/yamldoc"
)

// gateway.yaml and host.yaml are read by yamldoc, the one YAML dialect
// of sluice's files; these are its names as the schema files here use
// them.

// parser is yamldoc's walker of one file, with the gateway and host
// decoders.
type parser struct{ *yamldoc.Parser }

func newParser(file string, size int) *parser { return &parser{yamldoc.New(file, size)} }

type (
	item     = yamldoc.Item
	flag     = yamldoc.Flag
	text     = yamldoc.Text
	nonEmpty = yamldoc.NonEmpty
	upTo     = yamldoc.UpTo
	maxU16   = yamldoc.MaxU16
	maxU32   = yamldoc.MaxU32

	num[R yamldoc.Rule]     = yamldoc.Num[R]
	str[R yamldoc.TextRule] = yamldoc.Str[R]

	// FieldError and ValidationErrors are what ParseGateway and ParseHost
	// return.
	FieldError       = yamldoc.FieldError
	ValidationErrors = yamldoc.ValidationErrors
)

var (
	leafErr     = yamldoc.LeafErr
	scalar      = yamldoc.Scalar
	wholeNumber = yamldoc.WholeNumber
	show        = yamldoc.Show
	kindName    = yamldoc.KindName
)

func oneOf[T ~string](n *yaml.Node, out *T, allowed ...T) error {
	return yamldoc.OneOf(n, out, allowed...)
}

// maxErrors bounds the problems reported for one file.
const maxErrors = yamldoc.MaxErrors
