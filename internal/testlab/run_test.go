// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRunScript(t *testing.T) {
	s, err := runScript([]string{"PATH=/bin", "X=it's"}, "/work/my dir", `echo "$X"; exit 3`)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"export PATH='/bin'\n",
		`export X='it'\''s'` + "\n",
		"cd '/work/my dir' || exit 126\n",
		`exec /bin/sh -c 'echo "$X"; exit 3'` + "\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("script lacks %q:\n%s", want, s)
		}
	}
	// The host's sh must agree with the quoting.
	dir := t.TempDir()
	s, err = runScript([]string{"X=it's $HOME `x`"}, dir, `printf '%s|' "$X" "$(pwd)"; exit 3`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("/bin/sh", "-c", s).Output()
	if code := exitCode(err); code != 3 {
		t.Fatalf("exit %d (%v), want 3", code, err)
	}
	if want := "it's $HOME `x`|" + dir + "|"; string(out) != want {
		t.Fatalf("output %q, want %q", out, want)
	}
	for _, bad := range []string{"NOEQUALS", "1X=y", "A B=c", "=x"} {
		if _, err := runScript([]string{bad}, "/", "true"); err == nil {
			t.Errorf("env %q: want an error", bad)
		}
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

func TestQemuArgs(t *testing.T) {
	o := Options{Kernel: "/boot/vmlinuz-x", CPUs: 2, MemoryMB: 2048, Share: "/work/a,b", KernelArgs: "loglevel=7"}
	args := strings.Join(qemuArgs(o, "/cache/initrd", "/tmp/ctl"), " ")
	for _, want := range []string{
		"-machine q35 -accel tcg",
		"-smp 2 -m 2048",
		"-no-reboot",
		"path=/,security_model=none,readonly=on",
		"path=/work/a,,b,security_model=none",
		"mount_tag=sluiceshare",
		"mount_tag=sluicectl",
		"console=ttyS0 quiet loglevel=1 panic=-1 rdinit=/init loglevel=7",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("qemu args lack %q:\n%s", want, args)
		}
	}
	if strings.Contains(args, "kvm") {
		t.Errorf("qemu args mention kvm (unusable here):\n%s", args)
	}
}

func TestWithDefaults(t *testing.T) {
	dir := t.TempDir()
	o, err := Options{Kernel: "/k", Share: dir, Dir: "sub"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(dir)
	if o.Share != real || o.Dir != filepath.Join(real, "sub") || o.CPUs != 2 || o.MemoryMB != 2048 ||
		o.Timeout != 10*time.Minute || o.CacheDir != "/var/cache/sluice/vm" || o.Stdout != os.Stdout {
		t.Fatalf("defaults: %+v", o)
	}
	// The default share is the module root, wherever the test runs.
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repoRoot() = %s, no go.mod there", root)
	}
}

// skipWithoutVM skips only when Available says the VM cannot run here
// (no kernel or qemu installed); anything else must fail, not skip.
func skipWithoutVM(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a VM; skipped in -short mode")
	}
	if err := Available(); err != nil {
		t.Skipf("test VM unavailable: %v", err)
	}
}

// TestRunExitCode boots the VM twice (about 5-10 s each under TCG).
func TestRunExitCode(t *testing.T) {
	skipWithoutVM(t)
	var out, log bytes.Buffer
	o := Options{Stdout: &out, Log: &log, Timeout: 3 * time.Minute}
	code, err := Run(context.Background(), o, `echo hello; echo "in_vm=$SLUICE_IN_VM home=$HOME"; exit 3`)
	t.Log(strings.TrimSpace(log.String()))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if code != 3 {
		t.Errorf("exit 3: got exit code %d", code)
	}
	if want := "hello\nin_vm=1 home=/root\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}

	// Output without a final newline, then `true`: code 0, bytes intact.
	out.Reset()
	log.Reset()
	code, err = Run(context.Background(), o, `printf 'no newline'; true`)
	t.Log(strings.TrimSpace(log.String()))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if code != 0 {
		t.Errorf("true: got exit code %d", code)
	}
	if out.String() != "no newline" {
		t.Errorf("output %q, want %q", out.String(), "no newline")
	}
}

// TestRunTimeout kills qemu during boot: cheap, no full boot.
func TestRunTimeout(t *testing.T) {
	skipWithoutVM(t)
	start := time.Now()
	code, err := Run(context.Background(), Options{Stdout: &bytes.Buffer{}, Timeout: 2 * time.Second}, "true")
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("Run = %d, %v; want a timeout error", code, err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("timeout took %v to take effect", d)
	}
}

// TestRunRebootsAGuestThatDiesBeforeTheCommand gives the guest an init
// that does not exist, so its kernel panics before the command starts (as
// 6.12 under TCG occasionally does by itself): Run boots it bootAttempts
// times, says so, and then reports the failure.
func TestRunRebootsAGuestThatDiesBeforeTheCommand(t *testing.T) {
	skipWithoutVM(t)
	var log bytes.Buffer
	o := Options{Stdout: &bytes.Buffer{}, Log: &log, Timeout: 2 * time.Minute, KernelArgs: "rdinit=/no-such-init"}
	code, err := Run(context.Background(), o, "true")
	if err == nil || !strings.Contains(err.Error(), "stopped before the command started") {
		t.Fatalf("Run = %d, %v; want a boot failure", code, err)
	}
	if n := strings.Count(log.String(), "booting again"); n < 1 || n != bootAttempts-1 {
		t.Errorf("booted again %d times, want %d (at least once):\n%s", n, bootAttempts-1, log.String())
	}
	for i := 1; i < bootAttempts; i++ {
		if want := fmt.Sprintf("(attempt %d of %d); booting again", i, bootAttempts); !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
}

func TestHiddenInGuest(t *testing.T) {
	for _, c := range []struct {
		path, share string
		hidden      bool
	}{
		{"/tmp/x/sluice", "", true},
		{"/tmp/x/sluice", "/tmp/x", false},
		{"/tmpfoo/sluice", "", false},
		{"/run/sluice", "/work/main", true},
		{"/root/go/bin/sluice", "/work/main", true},
		{"/work/main/bin/sluice", "/work/main", false},
		{"/usr/local/bin/sluice", "/work/main", false},
	} {
		if got := HiddenInGuest(c.path, c.share); got != c.hidden {
			t.Errorf("HiddenInGuest(%q, %q) = %v, want %v", c.path, c.share, got, c.hidden)
		}
	}
}
