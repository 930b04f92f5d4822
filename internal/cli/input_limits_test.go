// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Every file a command reads is bounded and must be a regular file: before,
// /dev/zero grew the process until the OOM killer acted, a FIFO blocked
// plan forever, and a 200 MB gateway.yaml was read whole.
func TestFilesAreBoundedAndRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, 5<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	// host.yaml whose key file is a FIFO (mode 0600, so only its type is wrong).
	host := writeHost(t, strings.Replace(overlayHost, "MTU", "1500", 1), 0o600)
	keys := filepath.Join(filepath.Dir(host), "host.keys")
	if err := os.Remove(keys); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(keys, 0o600); err != nil {
		t.Fatal(err)
	}
	const dev, pipe, large = "is a character device", "is a named pipe (FIFO)", "larger than the 4 MiB limit"
	const kmsg = "/proc/kmsg is on procfs"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "run", "--profile", "/dev/zero"}, "/dev/zero " + dev},
		{[]string{"bench", "run", "--profile", fifo}, fifo + " " + pipe},
		{[]string{"bench", "run", "--profile", big}, big + ": file too large: " + large},
		{[]string{"swan", "gen", "--topology", "test0", "--role", "gw0", "--tunnels", "1", "--psk-file", "/dev/zero", "-o", filepath.Join(dir, "gw0")}, "/dev/zero is not a regular file"},
		{[]string{"swan", "gen", "--topology", "test0", "--role", "gw0", "--tunnels", "1", "--psk-file", fifo, "-o", filepath.Join(dir, "gw0")}, fifo + " is not a regular file"},
		{[]string{"gateway", "run", "-c", "/dev/zero"}, "/dev/zero " + dev},
		{[]string{"gateway", "run", "-c", big}, big + ": file too large: " + large},
		{[]string{"plan", "-f", "/dev/zero"}, "/dev/zero " + dev},
		{[]string{"plan", "-f", host}, keys + " is not a regular file"},
		{[]string{"tune", "check", "-f", fifo}, fifo + " " + pipe},
		{[]string{"doctor", "--facts", "/dev/zero"}, "/dev/zero " + dev},
		// A kernel file looks regular but can block its reader for ever.
		{[]string{"gateway", "explain", "-f", "/proc/kmsg", "src", "10.0.0.1", "dst", "10.0.0.2"}, kmsg},
		{[]string{"gateway", "run", "-f", "/proc/kmsg"}, kmsg},
		{[]string{"doctor", "--facts", "/proc/kmsg"}, kmsg},
		{[]string{"tune", "check", "-f", "/proc/kmsg"}, kmsg},
		{[]string{"plan", "-f", "/proc/kmsg"}, kmsg},
		{[]string{"bench", "run", "--profile", "/proc/kmsg"}, kmsg},
	} {
		done := make(chan struct{})
		var out string
		var err error
		go func() { out, err = runCLI(t, tc.args...); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("sluice %s: still reading after 20 s", strings.Join(tc.args, " "))
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || ExitCode(err) != ExitFailure {
			t.Errorf("sluice %s: exit %d, %v\nwant an error with %q\n%s", strings.Join(tc.args, " "), ExitCode(err), err, tc.want, out)
		}
	}
}
