// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/testutil"
)

// TestVersionChild is TestVersionUnprivileged's child: `sluice version`
// in a process without privileges.
func TestVersionChild(t *testing.T) {
	if os.Getenv("SLUICE_VERSION_CHILD") == "" {
		t.Skip("run by TestVersionUnprivileged")
	}
	out, err := runCLI(t, "version")
	os.Stdout.WriteString(out)
	if err != nil {
		t.Fatal(err)
	}
}

// `sluice version` as a user: the probes that need CAP_NET_ADMIN say
// unknown, and the command says to run as root (the kernel package only
// reports "not permitted"). It once panicked restoring a namespace the
// thread never left.
func TestVersionUnprivileged(t *testing.T) {
	testutil.RequireRoot(t, "drops to uid 65534 to run the probes unprivileged")
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755) //nolint:errcheck // uid 65534 runs the copy
	os.Chmod(dir, 0o755)               //nolint:errcheck
	bin := filepath.Join(dir, "cli.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	cmd := exec.Command("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--inh-caps=-all",
		bin, "-test.run=^TestVersionChild$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SLUICE_VERSION_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sluice version as uid 65534: %v\n%s", err, out)
	}
	testutil.MustContain(t, string(out), "operation not permitted\n", "\ncould not probe 8021q, bonding, esp, ", "(run as root)\n")
	if strings.Contains(string(out), "panic") {
		t.Fatalf("panicked:\n%s", out)
	}
}
