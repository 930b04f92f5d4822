// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"strings"
	"testing"

	"sluice/internal/testutil"
)

// 'lab up' names a lab with --name; down and status take the same flag as
// well as NAME, and refuse two different names.
func TestLabNameArgOrFlag(t *testing.T) {
	for _, c := range []struct {
		args       []string
		flag, want string
		err        bool
	}{
		{nil, "", "lab", false},
		{[]string{"gp"}, "", "gp", false},
		{nil, "gp", "gp", false},
		{[]string{"gp"}, "gp", "gp", false},
		{[]string{"gp"}, "x", "", true},
	} {
		got, err := labNameArg(c.args, c.flag)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("labNameArg(%q, %q) = %q, %v; want %q (error %v)", c.args, c.flag, got, err, c.want, c.err)
		}
	}
	testutil.RequireRoot(t, "lab down reads /run/sluice/lab")
	out, err := runCLI(t, "lab", "down", "--name", "nosuchlab")
	if err != nil || !strings.Contains(out, "lab nosuchlab: nothing to remove") {
		t.Fatalf("lab down --name nosuchlab: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "lab", "status", "--name", "nosuchlab"); err == nil || !strings.Contains(err.Error()+out, `lab "nosuchlab" is not up`) {
		t.Fatalf("lab status --name nosuchlab: %v\n%s", err, out)
	}
}
