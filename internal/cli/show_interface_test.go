// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// cx7Root is the ConnectX-7 benchmark's gateway as a sysfs/procfs tree
// (see ../diag/testdata/gen_cx7.go).
const cx7Root = "../diag/testdata/cx7"

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := NewRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := Execute(root)
	return out.String(), err
}

// The commands print exactly the goldens the renderer tests check.
func TestShowInterfaceCommands(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		golden string
	}{
		{[]string{"show", "interface", "topology", "--sysroot", cx7Root}, "topology.txt"},
		{[]string{"show", "interface", "rx-queue", "topology", "--sysroot", cx7Root, "p0", "p1"}, "rxq-p0-p1.txt"},
		{[]string{"show", "interface", "rx-queue", "topology", "--sysroot", cx7Root}, "rxq-all.txt"},
	} {
		out, err := runCLI(t, tc.args...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		want, err := os.ReadFile("testdata/golden/" + tc.golden)
		if err != nil {
			t.Fatal(err)
		}
		if out != string(want) {
			t.Errorf("%v: output differs from %s:\n%s", tc.args, tc.golden, out)
		}
	}
}

func TestShowInterfaceJSON(t *testing.T) {
	for _, args := range [][]string{
		{"show", "interface", "topology", "--json"},
		{"show", "interface", "rx-queue", "topology", "--json"},
		{"show", "interface", "rx-queue", "topology", "--json", "--sysroot", cx7Root, "p2"},
	} {
		out, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%v: not JSON: %v\n%s", args, err, out)
		}
		if _, ok := v["nodes"]; !ok {
			t.Errorf("%v: no nodes in %s", args, out)
		}
	}
}
