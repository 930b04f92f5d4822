// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"os"
	"strings"
	"testing"
)

// TestSystemdUnitCommandsParse: the shipped unit's commands must be ones
// this binary accepts, and ExecStopPost must stop the gateway: it is what
// removes a killed daemon's hardware rules (docs/flower.md).
func TestSystemdUnitCommandsParse(t *testing.T) {
	b, err := os.ReadFile("../../contrib/systemd/sluice-gateway.service")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"ExecStart": "sluice gateway run", "ExecStopPost": "sluice gateway stop"}
	for _, line := range strings.Split(string(b), "\n") {
		key, val, ok := strings.Cut(line, "=")
		path, isCmd := want[key]
		if !ok || !isCmd {
			continue
		}
		fields := strings.Fields(val)
		if len(fields) == 0 || !strings.HasSuffix(fields[0], "/sluice") {
			t.Fatalf("%s runs %q, not sluice", key, val)
		}
		cmd, rest, err := NewRootCommand().Find(fields[1:])
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if cmd.CommandPath() != path {
			t.Fatalf("%s runs %q, want %q", key, cmd.CommandPath(), path)
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Fatalf("%s %q: %v", key, val, err)
		}
		if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
			t.Fatalf("%s %q: %v", key, val, err)
		}
		delete(want, key)
	}
	if len(want) > 0 {
		t.Fatalf("the unit lacks %v", want)
	}
}
