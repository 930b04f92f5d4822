// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"bufio"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// IP runs `ip -n ns args...` and fails the test with ip's own words.
func IP(tb testing.TB, ns string, args ...string) string {
	tb.Helper()
	out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
	if err != nil {
		tb.Fatalf("ip -n %s %s: %v\n%s", ns, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// IPBatch feeds lines to `ip -n ns -batch -`: thousands of objects in one
// process, as a real daemon's burst would arrive.
func IPBatch(tb testing.TB, ns string, lines []string) {
	tb.Helper()
	cmd := exec.Command("ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("ip -n %s -batch: %v\n%s", ns, err, out)
	}
}

// KernelConfig reads the running kernel's build config, from /proc/config.gz
// or /boot/config-RELEASE, as "NAME" (without CONFIG_) to "y", "m", ...; it
// skips tb when neither exists.
func KernelConfig(tb testing.TB, release string) map[string]string {
	tb.Helper()
	var r io.Reader
	if f, err := os.Open("/proc/config.gz"); err == nil {
		defer f.Close()
		gz, err := gzip.NewReader(f)
		if err != nil {
			tb.Fatal(err)
		}
		r = gz
	} else if f, err := os.Open("/boot/config-" + release); err == nil {
		defer f.Close()
		r = f
	} else {
		tb.Skip("kernel config unavailable: neither /proc/config.gz nor /boot/config-" + release)
	}
	cfg := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && strings.HasPrefix(k, "CONFIG_") {
			cfg[strings.TrimPrefix(k, "CONFIG_")] = v
		}
	}
	return cfg
}
