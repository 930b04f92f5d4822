//go:build vmtest

package vm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sluiceBin is the binary scripts/vmtest.sh builds before booting the VM
// (the guest has no business compiling under TCG).
func sluiceBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("SLUICE_BIN")
	if bin == "" {
		t.Fatal("SLUICE_BIN is not set: run the VM tests through scripts/vmtest.sh, which builds bin/sluice")
	}
	return bin
}

// TestGatewayLeavesSoftwareSAsToTheKernel is invariant (a) end to end on a
// kernel with ESP: with sluice's XDP program on the gateway's ports and the
// kernel's policies mirrored, traffic whose SA is not packet-offloaded
// (software here; netdevsim crypto offload below) must be encrypted by the
// kernel: the far side of the WAN sees ESP only, never the cleartext.
//
//	gen 10.0.0.1 -- lan0 [dut: sluice XDP] wan0 123.0.0.1 ==ESP tunnel== s0 123.0.0.254 sink (48.0.1.1)
func TestGatewayLeavesSoftwareSAsToTheKernel(t *testing.T) {
	l := newLab(t)
	bin := sluiceBin(t)
	gen, dut, sink := l.netns(t), l.netns(t), l.netns(t)
	veth(t, gen, "g0", "10.0.0.1/24", dut, "lan0", "10.0.0.254/24")
	veth(t, dut, "wan0", "123.0.0.1/16", sink, "s0", "123.0.0.254/16")
	run(t, "ip", "-n", gen, "route", "add", "default", "via", "10.0.0.254")
	run(t, "ip", "-n", dut, "route", "add", "48.0.0.0/8", "via", "123.0.0.254")
	run(t, "ip", "-n", sink, "addr", "add", "48.0.1.1/32", "dev", "lo")
	run(t, "ip", "-n", sink, "route", "add", "10.0.0.0/8", "via", "123.0.0.1")
	nsRun(t, dut, "sysctl", "-qw", "net.ipv4.ip_forward=1")

	const key = "0x0123456789abcdef0123456789abcdef01234567"
	tunnel := func(ns, dir, src, dst, tsrc, tdst string) {
		run(t, "ip", "-n", ns, "xfrm", "policy", "add", "src", src, "dst", dst, "dir", dir,
			"tmpl", "src", tsrc, "dst", tdst, "proto", "esp", "mode", "tunnel", "reqid", "1")
	}
	sa := func(ns, src, dst, spi string) {
		run(t, "ip", "-n", ns, "xfrm", "state", "add", "src", src, "dst", dst, "proto", "esp", "spi", spi,
			"reqid", "1", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", key, "128")
	}
	sa(dut, "123.0.0.1", "123.0.0.254", "0x1001")
	sa(dut, "123.0.0.254", "123.0.0.1", "0x1002")
	tunnel(dut, "out", "10.0.0.0/8", "48.0.1.0/24", "123.0.0.1", "123.0.0.254")
	tunnel(dut, "in", "48.0.1.0/24", "10.0.0.0/8", "123.0.0.254", "123.0.0.1")
	tunnel(dut, "fwd", "48.0.1.0/24", "10.0.0.0/8", "123.0.0.254", "123.0.0.1")
	// The sink does NOT decrypt: a decrypting receiver re-injects the inner
	// packet on the same device, and captures there show it as cleartext.
	// GRO on s0 puts the veth in NAPI mode, so frames XDP might redirect
	// out of wan0 would really arrive (and be captured) instead of being
	// dropped silently.
	nsRun(t, sink, "ethtool", "-K", "s0", "gro", "on")

	// `ip netns exec` hides /sys/fs/bpf: share pins through a bpffs elsewhere.
	bpffs := t.TempDir()
	run(t, "mount", "-t", "bpf", "bpf", bpffs)
	l.undo("umount", bpffs)
	pinDir := filepath.Join(bpffs, "sluice")
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	os.WriteFile(cfg, []byte("pin-dir: "+pinDir+"\ninterfaces:\n  - name: lan0\n    l2: fib\n  - name: wan0\n    l2: fib\n"), 0o600)

	ctx, cancel := context.WithCancel(context.Background())
	daemon := exec.CommandContext(ctx, "ip", "netns", "exec", dut, bin, "gateway", "run", "-c", cfg)
	var logs bytes.Buffer
	daemon.Stdout, daemon.Stderr = &logs, &logs
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		try("ip", "netns", "exec", dut, bin, "gateway", "stop", "--pin-dir", pinDir)
		cancel()
		daemon.Wait()
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	})
	explain := func(args ...string) string {
		out, _ := try("ip", append([]string{"netns", "exec", dut, bin, "gateway", "explain", "--pin-dir", pinDir}, args...)...)
		return out
	}

	step(t, "the kernel's policies and SAs are mirrored", func(t *testing.T) {
		deadline := time.Now().Add(60 * time.Second)
		for {
			out := explain("--iface", "lan0", "src", "10.0.0.1", "dst", "48.0.1.1", "proto", "icmp", "type", "8")
			if strings.Contains(out, "not-offloaded") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("explain never saw the mirrored software-SA policy:\n%s", out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	step(t, "matching traffic leaves as ESP only", func(t *testing.T) {
		capture := exec.Command("ip", "netns", "exec", sink, "tcpdump", "-n", "-l", "-c", "3", "-i", "s0", "ip and not arp")
		var capOut bytes.Buffer
		capture.Stdout, capture.Stderr = &capOut, &capOut
		if err := capture.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // tcpdump under TCG is slow to start
		// No replies: the sink cannot decrypt. Only what crosses the wire counts.
		try("ip", "netns", "exec", gen, "ping", "-c", "3", "-i", "0.3", "-W", "1", "48.0.1.1")
		done := make(chan error, 1)
		go func() { done <- capture.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			capture.Process.Kill()
			<-done
		}
		out := capOut.String()
		if !strings.Contains(out, "ESP(spi=0x00001001") {
			t.Fatalf("no ESP from the gateway on the WAN:\n%s", out)
		}
		if strings.Contains(out, "ICMP") {
			t.Fatalf("cleartext ICMP on the WAN: the fast path leaked past the kernel's encryption:\n%s", out)
		}
	})
	step(t, "netdevsim crypto offload is not packet offload: still the kernel's", func(t *testing.T) {
		mod := os.Getenv("SLUICE_NETDEVSIM")
		if mod == "" {
			t.Fatal("SLUICE_NETDEVSIM not set: scripts/vmtest.sh builds netdevsim")
		}
		nsdev := netdevsim(t, l, mod, dut)
		run(t, "ip", "-n", dut, "xfrm", "state", "add", "src", "123.0.0.1", "dst", "123.0.9.9", "proto", "esp", "spi", "0x2001",
			"reqid", "9", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", key, "128", "offload", "dev", nsdev, "dir", "out")
		run(t, "ip", "-n", dut, "xfrm", "policy", "add", "src", "10.0.0.0/8", "dst", "48.0.9.0/24", "dir", "out",
			"tmpl", "src", "123.0.0.1", "dst", "123.0.9.9", "proto", "esp", "mode", "tunnel", "reqid", "9")
		deadline := time.Now().Add(30 * time.Second)
		for {
			out := explain("--iface", "lan0", "src", "10.0.0.1", "dst", "48.0.9.1")
			if strings.Contains(out, "not-offloaded") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("crypto-offloaded SA: explain says\n%s", out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// netdevsim loads the module if needed and creates a one-port device whose
// netdev lives in ns, up; it returns the netdev's name.
func netdevsim(t *testing.T, l *lab, ko, ns string) string {
	t.Helper()
	if _, err := os.Stat("/sys/module/netdevsim"); err != nil {
		for _, dep := range strings.Split(strings.TrimSpace(run(t, "modinfo", "-F", "depends", ko)), ",") {
			if dep != "" {
				run(t, "modprobe", dep)
			}
		}
		run(t, "insmod", ko)
	}
	id := freeNetdevsimID()
	nsRun(t, ns, "sh", "-c", fmt.Sprintf("echo '%d 1' > /sys/bus/netdevsim/new_device", id))
	l.owner.Cleanup(func() { os.WriteFile("/sys/bus/netdevsim/del_device", []byte(strconv.Itoa(id)), 0) })
	dev := netdevsimNetdev(t, ns, id)
	run(t, "ip", "-n", ns, "link", "set", dev, "up")
	return dev
}
