// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil"
)

// privateLibvirtd is a libvirtd the test started for itself: root's
// qemu:///system driver, but in its own network namespace (the guest's
// tap, the bridge and the ping live there and vanish with it) and its own
// mount namespace, where libvirt's directories (/etc/libvirt, /run,
// /var/lib|log|cache/libvirt) are bind mounts of a temp dir. Nothing of it
// touches the host's libvirt, if there is one.
type privateLibvirtd struct {
	dir, netns, uri string
	cmd             *exec.Cmd
	exited          chan struct{} // closed when the daemon has exited
	// made are the empty mount points the test created on the host (no
	// libvirt-daemon-system here): removed again by stop.
	made []string
}

// qemuConf runs QEMU as root with no confinement: the daemon is a test
// fixture, and Debian's libvirt-daemon without libvirt-daemon-system has
// neither the libvirt-qemu user nor AppArmor profiles. stdio_handler file:
// no virtlogd needed. No cgroups or private /dev: the test host may not
// delegate them.
const qemuConf = `user = "root"
group = "root"
dynamic_ownership = 0
security_driver = "none"
namespaces = [ ]
cgroup_controllers = [ ]
stdio_handler = "file"
`

// startLibvirtd starts the daemon and waits for its socket; it skips the
// test when libvirtd or qemu cannot run here.
func startLibvirtd(t *testing.T) *privateLibvirtd {
	t.Helper()
	testutil.RequireRoot(t, "libvirtd's qemu:///system driver creates taps")
	for _, b := range []string{"libvirtd", "virsh", "qemu-system-x86_64", "ip", "ping", "stty"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("%s not installed (make setup installs libvirt-daemon-driver-qemu, libvirt-clients, qemu-system-x86)", b)
		}
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no /dev/net/tun: libvirt cannot create the guest's tap: %v", err)
	}
	// A short root: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "sluice-lv-")
	if err != nil {
		t.Fatal(err)
	}
	l := &privateLibvirtd{dir: dir, netns: filepath.Base(dir)}
	l.uri = "qemu:///system?socket=" + filepath.Join(dir, "sock", "libvirt-sock")
	t.Cleanup(func() { l.stop(t) })
	for _, d := range []string{"sock", "etc", "run", "lib", "log", "cache"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := fmt.Sprintf("unix_sock_dir = %q\nlog_outputs = \"3:file:%s\"\n", filepath.Join(dir, "sock"), filepath.Join(dir, "libvirtd.log"))
	write(t, filepath.Join(dir, "libvirtd.conf"), conf)
	write(t, filepath.Join(dir, "etc", "qemu.conf"), qemuConf)
	// libvirtd resolves the build's default QEMU user (libvirt-qemu) before
	// it reads qemu.conf: private passwd/group files name it.
	for _, f := range []string{"passwd", "group"} {
		b, err := os.ReadFile("/etc/" + f)
		if err != nil {
			t.Fatal(err)
		}
		line := "libvirt-qemu:x:64055:64055:libvirt:/var/lib/libvirt:/usr/sbin/nologin\n"
		if f == "group" {
			line = "libvirt-qemu:x:64055:\n"
		}
		write(t, filepath.Join(dir, f), string(b)+line)
	}
	if out, err := exec.Command("ip", "netns", "add", l.netns).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace: %v: %s", err, out)
	}
	// ip netns exec runs the command in a fresh mount namespace (slave of
	// the host's), so these bind mounts are the daemon's alone.
	binds := [][2]string{{"passwd", "/etc/passwd"}, {"group", "/etc/group"}, {"etc", "/etc/libvirt"}, {"run", "/run"},
		{"lib", "/var/lib/libvirt"}, {"log", "/var/log/libvirt"}, {"cache", "/var/cache/libvirt"}}
	var sh strings.Builder
	sh.WriteString("set -e\n")
	for _, b := range binds {
		if _, err := os.Stat(b[1]); os.IsNotExist(err) {
			if err := os.MkdirAll(b[1], 0o755); err != nil {
				t.Fatal(err)
			}
			l.made = append(l.made, b[1])
		}
		fmt.Fprintf(&sh, "mount --bind %s %s\n", filepath.Join(dir, b[0]), b[1])
	}
	fmt.Fprintf(&sh, "exec libvirtd -f %s -p %s\n", filepath.Join(dir, "libvirtd.conf"), filepath.Join(dir, "libvirtd.pid"))
	l.cmd = exec.Command("ip", "netns", "exec", l.netns, "sh", "-c", sh.String())
	out, err := os.Create(filepath.Join(dir, "libvirtd.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	l.cmd.Stdout, l.cmd.Stderr = out, out
	if err := l.cmd.Start(); err != nil {
		t.Skipf("cannot start libvirtd: %v", err)
	}
	l.exited = make(chan struct{})
	go func() { l.cmd.Wait(); close(l.exited) }()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := l.virsh("version"); err == nil {
			return l
		}
		select {
		case <-l.exited:
			t.Fatalf("libvirtd exited at start: %s\n%s", l.logTail(), readFile(filepath.Join(dir, "libvirtd.out")))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("libvirtd did not answer on %s in 30s: %s", l.uri, l.logTail())
		}
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// logTail is the end of the daemon's log (errors and warnings).
func (l *privateLibvirtd) logTail() string {
	lines := strings.Split(strings.TrimSpace(readFile(filepath.Join(l.dir, "libvirtd.log"))), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

func (l *privateLibvirtd) virsh(args ...string) (string, error) {
	out, err := exec.Command("virsh", append([]string{"-c", l.uri}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// inNetns runs a command in the daemon's network namespace.
func (l *privateLibvirtd) inNetns(args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", l.netns}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// stop kills whatever guest QEMU is left (its pid files are in the private
// /run), the daemon, the namespace and the temp dir.
func (l *privateLibvirtd) stop(t *testing.T) {
	pids, _ := filepath.Glob(filepath.Join(l.dir, "run", "libvirt", "qemu", "*.pid"))
	for _, p := range pids {
		var pid int
		if _, err := fmt.Sscan(readFile(p), &pid); err == nil && pid > 1 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if l.exited != nil {
		l.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-l.exited:
		case <-time.After(10 * time.Second):
			t.Logf("libvirtd ignored SIGTERM for 10s: killed")
			l.cmd.Process.Kill()
			<-l.exited
		}
	}
	if out, err := exec.Command("ip", "netns", "del", l.netns).CombinedOutput(); err != nil {
		t.Errorf("delete netns %s: %v\n%s", l.netns, err, out)
	}
	for i := len(l.made) - 1; i >= 0; i-- {
		os.Remove(l.made[i]) // only if still empty
	}
	if t.Failed() {
		t.Logf("libvirtd log:\n%s", l.logTail())
	}
	os.RemoveAll(l.dir)
}
