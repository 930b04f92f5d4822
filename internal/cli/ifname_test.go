// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Interface names reach generated scripts (routing.sh) and printed
// commands (tune plan): each is checked as the kernel would, so a newline
// cannot start a command of its own. A PSK file others can read is
// refused like host.yaml's key files.
func TestInterfaceNamesAndPSKFileChecked(t *testing.T) {
	dir := t.TempDir()
	psk := filepath.Join(dir, "psk")
	if err := os.WriteFile(psk, []byte("0x00112233445566778899aabbccddeeff\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prof := filepath.Join(dir, "tune.yaml")
	if err := os.WriteFile(prof, []byte("interfaces:\n  ../../x:\n    cpus: 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gen := []string{"swan", "gen", "--topology", "routed", "--role", "gw0", "--tunnels", "1", "-o", filepath.Join(dir, "gw0")}
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{append(gen, "--p0-dev", "p0\nreboot"), `--p0-dev: "p0\nreboot" contains '\n'`, ExitUsage},
		{append(gen, "--p1-dev", "p1 x"), `--p1-dev: "p1 x" contains ' '`, ExitUsage},
		{append(gen, "--p0-dev", "abcdefghijklmnop"), `--p0-dev: "abcdefghijklmnop" is 16 bytes long`, ExitUsage},
		{append(gen, "--p0-dev", "a/b"), `--p0-dev: "a/b" contains '/'`, ExitUsage},
		{append(gen, "--psk-file", psk), "--psk-file refused: " + psk + " has mode 0644", ExitFailure},
		{[]string{"tune", "plan", "-f", prof}, `interfaces.../../x: "../../x" contains '/'`, ExitFailure},
	} {
		out, err := runCLI(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || ExitCode(err) != tc.code {
			t.Errorf("sluice %q: exit %d, %v\nwant exit %d with %q\n%s", tc.args, ExitCode(err), err, tc.code, tc.want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "gw0", "routing.sh")); err == nil {
		t.Errorf("a refused gen wrote routing.sh")
	}
}

// An interface a flag names and the kernel does not know: the kernel
// says so, the command adds how to check the name.
func TestInterfaceFlagsCarryTheFix(t *testing.T) {
	const fix = ": interface \"nosuch0\": Link not found (check the name with `ip link`)"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"show", "ipsec", "sa", "--dev", "nosuch0"}, "--dev" + fix},
		{[]string{"gateway", "explain", "--iface", "nosuch0", "10.0.0.1", "10.1.0.1"}, "--iface" + fix},
	} {
		if _, err := runCLI(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sluice %q: %v\nwant %s", tc.args, err, tc.want)
		}
	}
}
