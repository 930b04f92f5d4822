// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const qemuBinary = "qemu-system-x86_64"

// guestPath is the command's PATH in the guest: init's own environment (the
// initramfs's /bin only) is not passed on.
const guestPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Available reports nil when a VM can run here, else an error saying what is
// missing and the fix ("run make setup").
func Available() error {
	root, err := selectedRoot()
	if err != nil {
		return fmt.Errorf("testlab: %w", err)
	}
	k, err := defaultKernelIn(root)
	if err != nil {
		return fmt.Errorf("testlab: %w", err)
	}
	_, err = checkHost(root, k)
	return err
}

// DefaultKernel returns the kernel Run boots when Options.Kernel is empty,
// and its release.
func DefaultKernel() (path, release string, err error) {
	root, err := selectedRoot()
	if err != nil {
		return "", "", fmt.Errorf("testlab: %w", err)
	}
	path, err = defaultKernelIn(root)
	if err != nil {
		return "", "", fmt.Errorf("testlab: %w", err)
	}
	release, err = kernelRelease(path)
	if err != nil {
		return "", "", fmt.Errorf("testlab: %w", err)
	}
	return path, release, nil
}

// checkHost verifies everything Run needs from the host for kernel k over
// root and returns k's release.
func checkHost(root, kernel string) (string, error) {
	if _, err := exec.LookPath(qemuBinary); err != nil {
		return "", fmt.Errorf("testlab: %s not found (run make setup: qemu-system-x86)", qemuBinary)
	}
	if _, err := os.Stat(kernel); err != nil {
		return "", fmt.Errorf("testlab: VM kernel: %w (run make setup)", err)
	}
	release, err := kernelRelease(kernel)
	if err != nil {
		return "", fmt.Errorf("testlab: %w", err)
	}
	mods, err := bootModuleFiles(root, release)
	if err != nil {
		return "", fmt.Errorf("testlab: %w", err)
	}
	for _, m := range mods {
		tool := ""
		switch {
		case strings.HasSuffix(m, ".xz"):
			tool = "xz"
		case strings.HasSuffix(m, ".zst"):
			tool = "zstd"
		}
		if tool != "" {
			if _, err := exec.LookPath(tool); err != nil {
				return "", fmt.Errorf("testlab: %s is needed to decompress %s (run make setup)", tool, m)
			}
		}
	}
	if _, err := findStaticBusybox(); err != nil {
		return "", fmt.Errorf("testlab: %w", err)
	}
	return release, nil
}

// Run boots the VM, runs command with /bin/sh -c in the guest (as root, host
// root filesystem chrooted), and returns its exit code. err is non-nil only
// when the VM itself failed (no kernel, boot failure, timeout) — a failing
// command is exitCode != 0 with err == nil.
func Run(ctx context.Context, opts Options, command string) (exitCode int, err error) {
	o, err := opts.withDefaults()
	if err != nil {
		return -1, err
	}
	release, err := checkHost(o.Root, o.Kernel)
	if err != nil {
		return -1, err
	}
	t0 := time.Now()
	initrd, err := initramfs(o.CacheDir, o.Root, release)
	if err != nil {
		return -1, fmt.Errorf("testlab: %w", err)
	}
	o.logf("initramfs %s (%.1fs)", initrd, time.Since(t0).Seconds())

	env := []string{
		"PATH=" + guestPath,
		"HOME=/root",
		"USER=root",
		"LOGNAME=root",
		"SLUICE_IN_VM=1",
	}
	if p := netdevsimPath(o.CacheDir, release); fileExists(p) {
		env = append(env, "SLUICE_NETDEVSIM="+guestView(o.Root, p))
	}
	if p, err := nicmodelPath(o.CacheDir, release); err == nil && fileExists(p) {
		env = append(env, "SLUICE_NICMODEL="+guestView(o.Root, p))
	}
	if fileExists(inRoot(o.Root, IPPacketOffload)) {
		env = append(env, "SLUICE_IP_PACKET="+IPPacketOffload)
	} else if o.Root != "/" && fileExists(inRoot(o.Root, "/usr/sbin/ip")) {
		// A root newer than bookworm: its own iproute2 knows "offload packet".
		env = append(env, "SLUICE_IP_PACKET=/usr/sbin/ip")
	}
	if o.Root != "/" {
		// The share is mounted at its host path: the read-only root
		// needs the mount point (init.sh cannot make it there).
		if err := os.MkdirAll(inRoot(o.Root, o.Share), 0o755); err != nil {
			return -1, fmt.Errorf("testlab: mount point for the share in %s: %w", o.Root, err)
		}
	}
	env = append(env, o.Env...)
	script, err := runScript(env, o.Dir, command)
	if err != nil {
		return -1, err
	}

	// The control share: a private host dir, never the caller's tree.
	ctl, err := os.MkdirTemp("", "sluice-vm-")
	if err != nil {
		return -1, fmt.Errorf("testlab: %w", err)
	}
	defer os.RemoveAll(ctl)
	nonce, err := randomNonce()
	if err != nil {
		return -1, err
	}
	config := fmt.Sprintf("NONCE=%s\nSHARE=%s\n", nonce, shellQuote(o.Share))
	if err := os.WriteFile(filepath.Join(ctl, "config"), []byte(config), 0o644); err != nil {
		return -1, fmt.Errorf("testlab: %w", err)
	}
	if err := os.WriteFile(filepath.Join(ctl, "run.sh"), []byte(script), 0o755); err != nil {
		return -1, fmt.Errorf("testlab: %w", err)
	}
	if err := writeEtcArchive(inRoot(o.Root, "/etc"), filepath.Join(ctl, "etc.tar")); err != nil {
		return -1, fmt.Errorf("testlab: archiving /etc for the guest: %w", err)
	}

	// A guest kernel that dies before the command starts (under TCG, 6.12
	// has been seen to oops in sched_clock_cpu while patching a static key
	// at boot) ran nothing: booting again is safe, and a CI run must not
	// go red for it. A boot that hangs is not retried: it already took the
	// whole timeout.
	for attempt := 1; ; attempt++ {
		code, err := o.boot(ctx, initrd, ctl, nonce)
		var bf *bootFailure
		if !errors.As(err, &bf) || attempt >= bootAttempts {
			return code, err
		}
		o.logf("the guest stopped before the command started (attempt %d of %d); booting again:%s", attempt, bootAttempts, bf.console)
	}
}

// bootAttempts bounds how often Run boots a guest that dies before its
// command starts.
const bootAttempts = 3

// bootFailure is a VM that stopped before the command started.
type bootFailure struct {
	msg, console string
}

func (e *bootFailure) Error() string { return e.msg }

// boot runs the prepared VM once.
func (o Options) boot(ctx context.Context, initrd, ctl, nonce string) (exitCode int, err error) {
	runCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	filter := newConsoleFilter(nonce, o.Stdout, o.Console)
	qemuErr := &tailBuffer{limit: 4 << 10}
	cmd := exec.CommandContext(runCtx, qemuBinary, qemuArgs(o, initrd, ctl)...)
	cmd.Stdout = filter
	cmd.Stderr = qemuErr
	// stdin stays /dev/null: qemu then leaves the terminal alone (with a tty
	// on stdin it would switch it to raw mode).
	cmd.WaitDelay = 5 * time.Second
	// If the test process dies (e.g. go test's -timeout panic), qemu must
	// not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	runErr := cmd.Run()
	filter.Close()
	elapsed := time.Since(start)
	if !filter.began.IsZero() {
		o.logf("guest ready after %.1fs; command ran %.1fs", filter.began.Sub(start).Seconds(), time.Since(filter.began).Seconds())
	}

	switch {
	case ctx.Err() != nil:
		return -1, fmt.Errorf("testlab: VM run canceled: %w", ctx.Err())
	case errors.Is(runCtx.Err(), context.DeadlineExceeded):
		where := "before the command started (boot stuck?)"
		if !filter.began.IsZero() {
			where = "while the command was running"
		}
		return -1, fmt.Errorf("testlab: VM timed out after %v %s; qemu was killed%s", o.Timeout, where, filter.context())
	}

	code, ok := readExitFile(filepath.Join(ctl, "exit"))
	if !ok && filter.haveCode {
		code, ok = filter.code, true
	}
	if !ok {
		if filter.began.IsZero() && ctx.Err() == nil {
			return -1, &bootFailure{
				msg: fmt.Sprintf("testlab: VM stopped before the command started after %.1fs (qemu: %v)%s%s",
					elapsed.Seconds(), runErr, qemuErr.context("qemu stderr"), filter.context()),
				console: filter.context(),
			}
		}
		return -1, fmt.Errorf("testlab: VM stopped before the command finished after %.1fs (qemu: %v)%s%s",
			elapsed.Seconds(), runErr, qemuErr.context("qemu stderr"), filter.context())
	}
	if filter.outErr != nil {
		return code, fmt.Errorf("testlab: writing the command's output: %w", filter.outErr)
	}
	return code, nil
}

func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "testlab: "+format+"\n", args...)
	}
}

// qemuArgs builds the qemu command line; see doc.go for the why of each part.
func qemuArgs(o Options, initrd, ctl string) []string {
	appendLine := "console=ttyS0 quiet loglevel=1 panic=-1 rdinit=/init"
	if o.KernelArgs != "" {
		appendLine += " " + o.KernelArgs
	}
	args := []string{
		"-machine", "q35", "-accel", "tcg", "-cpu", "max",
		"-smp", strconv.Itoa(o.CPUs), "-m", strconv.Itoa(o.MemoryMB),
		// No default NIC, VGA, floppy or monitor: less to emulate and probe.
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con",
		"-kernel", o.Kernel, "-initrd", initrd, "-append", appendLine,
	}
	// multidevs=remap: the host root spans several filesystems; without it
	// inode numbers from different ones could collide in the guest.
	args = append(args, virtfs("hostroot", cmp.Or(o.Root, "/"), "readonly=on,multidevs=remap")...)
	args = append(args, virtfs("sluiceshare", o.Share, "")...)
	args = append(args, virtfs("sluicectl", ctl, "")...)
	return args
}

func virtfs(tag, path, extra string) []string {
	fs := "local,id=" + tag + ",path=" + qemuEscape(path) + ",security_model=none"
	if extra != "" {
		fs += "," + extra
	}
	return []string{"-fsdev", fs, "-device", "virtio-9p-pci,fsdev=" + tag + ",mount_tag=" + tag}
}

// qemuEscape doubles commas, qemu's escape inside option values.
func qemuEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// runScript is the guest-side wrapper: a clean environment, the working
// directory, then the command through /bin/sh -c.
func runScript(env []string, dir, command string) (string, error) {
	var b strings.Builder
	b.WriteString("# written by internal/testlab for one VM run\n")
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !envName.MatchString(k) {
			return "", fmt.Errorf("testlab: bad environment entry %q (want NAME=value)", kv)
		}
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
	}
	fmt.Fprintf(&b, "cd %s || exit 126\n", shellQuote(dir))
	fmt.Fprintf(&b, "exec /bin/sh -c %s\n", shellQuote(command))
	return b.String(), nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func randomNonce() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func readExitFile(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// context formats the console tail for an error message.
func (f *consoleFilter) context() string {
	t := f.tail(30)
	if t == "" {
		return "; the console was silent"
	}
	return "\nconsole (last lines):\n" + t
}

// tailBuffer keeps the last limit bytes written (qemu's stderr).
type tailBuffer struct {
	limit int
	b     []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.limit {
		t.b = t.b[len(t.b)-t.limit:]
	}
	return len(p), nil
}

func (t *tailBuffer) context(label string) string {
	s := strings.TrimSpace(string(t.b))
	if s == "" {
		return ""
	}
	return "\n" + label + ":\n" + s
}
