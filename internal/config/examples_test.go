// SPDX-License-Identifier: Apache-2.0

package config

import (
	"os"
	"testing"
)

// TestShippedExamplesParse: the packages install contrib/examples under
// /usr/share/doc/sluice/examples; a copied example must parse as it is.
func TestShippedExamplesParse(t *testing.T) {
	for name, parse := range map[string]func([]byte, string) error{
		"gateway.yaml": func(b []byte, n string) error { _, err := ParseGateway(b, n); return err },
		"host.yaml":    func(b []byte, n string) error { _, err := ParseHost(b, n); return err },
	} {
		path := "../../contrib/examples/" + name
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := parse(b, path); err != nil {
			t.Errorf("%v", err)
		}
	}
}
