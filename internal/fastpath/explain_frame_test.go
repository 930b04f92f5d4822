// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"strings"
	"testing"
)

func TestExplainFrameErrors(t *testing.T) {
	for _, c := range []struct {
		name, hex string
		args      []string
		want      string
	}{
		{"one-byte hex frame", "00", nil, "shorter than an Ethernet header"},
		{"13-byte hex frame", strings.Repeat("00", 13), nil, "shorter than an Ethernet header"},
		{"src twice", "", []string{"src", "10.0.0.1", "dst", "10.0.0.2", "src", "10.0.0.3"}, `"src" given twice`},
		{"ttl and hoplimit", "", []string{"src", "fd00::1", "dst", "fd00::2", "ttl", "3", "hoplimit", "4"}, `"hoplimit" given twice`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ExplainFrame(c.hex, c.args, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	f, err := ExplainFrame("", []string{"src", "10.0.0.1", "dst", "10.0.0.2"}, []byte{2, 0, 0, 0, 0, 7})
	if err != nil || f[5] != 7 {
		t.Fatalf("fields without dmac: %v, destination MAC % x; want the ingress interface's", err, f[:6])
	}
}
