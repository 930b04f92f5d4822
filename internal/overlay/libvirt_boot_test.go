// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testlab"
)

// guestInit is the booted guest's PID 1 (busybox from testlab's
// initramfs): load virtio_net, bring eth0 up at the MTU virtio hands it
// (libvirt's <mtu>, advertised as host_mtu), take the address the kernel
// command line gives (sluice_addr= reaches init as an environment
// variable), and report the MTU on the serial console every second, so a
// reader that opens the console late still sees it.
const guestInit = `#!/bin/sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r m; do insmod "/modules/$m" || echo "sluice-guest: insmod $m failed"; done </modules/order
ip link set lo up
ip link set eth0 up
ip addr add "$sluice_addr" dev eth0
while :; do
	echo "sluice-guest: eth0 mtu $(cat /sys/class/net/eth0/mtu) addr $sluice_addr"
	sleep 1
done
`

// TestLibvirtGuestBoots defines the domain sluice plans for a virtio guest
// on a Linux-bridge network against a real libvirtd (started by the test,
// private), boots it under TCG with the test VM's kernel and a busybox
// initramfs, and checks that the guest's NIC took the MTU sluice computed
// and answers a ping across the bridge at that MTU with DF set. It runs on
// the host: TCG inside the TCG test VM would be too slow.
func TestLibvirtGuestBoots(t *testing.T) {
	kernelPath, release, err := testlab.DefaultKernel()
	if err != nil {
		t.Skipf("no guest kernel: %v", err)
	}
	lv := startLibvirtd(t)
	// sluice's own virsh calls (the define and undefine steps) go to the
	// private daemon.
	t.Setenv("LIBVIRT_DEFAULT_URI", lv.uri)
	// This host's /dev/kvm stops every guest ("KVM internal error"): TCG.
	orig := kvmAvailable
	kvmAvailable = func() bool { return false }
	t.Cleanup(func() { kvmAvailable = orig })

	initrd, err := testlab.GuestInitramfs(t.TempDir(), release, guestInit, []string{"virtio_net"})
	if err != nil {
		t.Fatal(err)
	}
	const guestAddr, hostAddr = "10.77.0.2", "10.77.0.1"
	DefaultGuestDir = t.TempDir()
	body := seedHost("none", "") + `guest-networks:
  - {name: t1, vtep: vxlan1, bridge: linux}
guests:
  - name: sluice-boot
    network: t1
    attach: virtio
    mac: 02:00:00:00:01:02
    vcpus: 1
    memory-mib: 256
    poll-us: 50
    kernel: ` + kernelPath + `
    initrd: ` + initrd + `
    cmdline: console=ttyS0 panic=-1 loglevel=4 sluice_addr=` + guestAddr + `/24
    define: true
`
	h, ks := load(t, body)
	p, err := NewPlan(h, ks, matchingLive(t))
	if err != nil {
		t.Fatal(err)
	}
	domXML := planDomainXML(t, p, "sluice-boot")
	m := regexp.MustCompile(`<mtu size="(\d+)"`).FindStringSubmatch(domXML)
	if m == nil {
		t.Fatalf("the domain has no <mtu>:\n%s", domXML)
	}
	mtu, _ := strconv.Atoi(m[1])
	if !strings.Contains(domXML, `<domain type="qemu"`) || !strings.Contains(domXML, "netdev.hostnet0.poll-us=50") {
		t.Fatalf("want a TCG domain with vhost poll-us:\n%s", domXML)
	}
	t.Logf("sluice's guest MTU: %d", mtu)

	// The bridge with the command sluice's plan prints for network t1 (its
	// VTEP port is left out: this test is about the guest).
	br := h.GuestNetwork("t1").BridgeName
	add := "ip link add " + br + " mtu " + strconv.Itoa(mtu) + " type bridge"
	if !strings.Contains(commandsOf(p), add+"\n") {
		t.Fatalf("the plan lacks %q:\n%s", add, commandsOf(p))
	}
	for _, c := range [][]string{
		strings.Fields(add),
		{"ip", "addr", "add", hostAddr + "/24", "dev", br},
		{"ip", "link", "set", br, "up"},
	} {
		if out, err := lv.inNetns(c...); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(c, " "), err, out)
		}
	}

	// sluice's define step, then the guest's life.
	file := filepath.Join(DefaultGuestDir, "sluice-boot.xml")
	write(t, file, domXML)
	if out, err := runVirsh("define", file); err != nil {
		t.Fatalf("virsh define: %v: %s\n%s", err, out, domXML)
	}
	if out, err := lv.virsh("start", "sluice-boot"); err != nil {
		t.Fatalf("virsh start: %v: %s\n%s\nqemu log:\n%s", err, out, lv.logTail(),
			readFile(filepath.Join(lv.dir, "log", "qemu", "sluice-boot.log")))
	}
	t.Cleanup(func() {
		lv.virsh("destroy", "sluice-boot")
		lv.virsh("undefine", "sluice-boot")
	})
	// QEMU got poll-us through libvirt's -set, on a -netdev in option
	// syntax (the netdev.json capability deleted).
	if cl := readFile(filepath.Join(lv.dir, "log", "qemu", "sluice-boot.log")); !strings.Contains(cl, "poll-us=50") || !strings.Contains(cl, "-netdev tap,") {
		t.Errorf("QEMU's command line lacks poll-us=50 or an option-syntax -netdev tap:\n%s", cl)
	} else {
		t.Logf("QEMU: %s", regexp.MustCompile(`-netdev tap,\S*`).FindString(cl))
	}
	if out, _ := lv.inNetns("ip", "-o", "link", "show", "master", br); !strings.Contains(out, "mtu "+strconv.Itoa(mtu)+" ") {
		t.Errorf("the guest's tap in %s should have MTU %d (libvirt's <mtu>): %s", br, mtu, out)
	}

	got := waitConsole(t, lv, "sluice-boot", regexp.MustCompile(`sluice-guest: eth0 mtu (\d+)`), 90*time.Second)
	if got != strconv.Itoa(mtu) {
		t.Errorf("the guest's eth0 has MTU %s, want sluice's %d", got, mtu)
	}
	// The largest ICMP echo with DF that fits the MTU crosses the bridge
	// both ways (the reply is as large); one byte more does not leave.
	full := strconv.Itoa(mtu - 28)
	var out string
	for deadline := time.Now().Add(30 * time.Second); ; {
		if out, err = lv.inNetns("ping", "-c", "1", "-W", "2", "-M", "do", "-s", full, guestAddr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ping -M do -s %s %s: %v: %s", full, guestAddr, err, out)
		}
	}
	if out, err := lv.inNetns("ping", "-c", "1", "-W", "2", "-M", "do", "-s", strconv.Itoa(mtu-27), guestAddr); err == nil {
		t.Errorf("a %d-byte packet with DF crossed a %d MTU: %s", mtu+1, mtu, out)
	}

	// Destroy first: undefining a running domain only makes it transient,
	// and it would go on running. Then sluice's teardown call undefines.
	if out, err := lv.virsh("destroy", "sluice-boot"); err != nil {
		t.Errorf("virsh destroy: %v: %s", err, out)
	}
	if out, err := runVirsh("undefine", "sluice-boot"); err != nil {
		t.Errorf("virsh undefine: %v: %s", err, out)
	}
	if out, _ := lv.virsh("list", "--all", "--name"); strings.TrimSpace(out) != "" {
		t.Errorf("domains left after undefine: %s", out)
	}
}

// planDomainXML is the domain XML the plan writes for guest name: the
// heredoc of its "domain XML" step, exactly what apply writes.
func planDomainXML(t *testing.T, p *Plan, name string) string {
	t.Helper()
	for _, s := range p.Steps {
		if s.Object != "domain XML "+filepath.Join(DefaultGuestDir, name+".xml") {
			continue
		}
		for _, c := range s.Commands {
			if _, x, ok := strings.Cut(c, "<<'EOF'\n"); ok {
				return strings.TrimSuffix(x, "EOF")
			}
		}
	}
	t.Fatalf("the plan writes no domain XML for %s:\n%s", name, commandsOf(p))
	return ""
}

// waitConsole reads the guest's serial console (a pty: virsh ttyconsole)
// until re matches a line, and returns re's first group.
func waitConsole(t *testing.T, lv *privateLibvirtd, dom string, re *regexp.Regexp, limit time.Duration) string {
	t.Helper()
	tty, err := lv.virsh("ttyconsole", dom)
	if err != nil {
		t.Fatalf("virsh ttyconsole: %v: %s", err, tty)
	}
	// Raw and without echo: what QEMU writes must not be sent back to the
	// guest's serial input.
	if out, err := exec.Command("stty", "-F", tty, "raw", "-echo").CombinedOutput(); err != nil {
		t.Fatalf("stty %s: %v: %s", tty, err, out)
	}
	f, err := os.OpenFile(tty, os.O_RDONLY|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.SetReadDeadline(time.Now().Add(limit))
	var seen []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if m := re.FindStringSubmatch(line); m != nil {
			return m[1]
		}
		if seen = append(seen, line); len(seen) > 30 {
			seen = seen[1:]
		}
	}
	t.Fatalf("no %q on %s's console in %s (%v); last lines:\n%s", re, dom, limit, sc.Err(), strings.Join(seen, "\n"))
	return ""
}
