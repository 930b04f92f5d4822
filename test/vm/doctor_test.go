// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

// sluice doctor and the interface views on the test VM's kernel: bonds over
// netdevsim ports (the one driver here with ESP offload), real SAs, a real
// VXLAN, devlink eswitch modes; and show interface topology / rx-queue
// topology on the VM's own devices.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/internal/diag"
)

// ensureNetdevsim loads netdevsim (and what it depends on) once per VM.
func ensureNetdevsim(t *testing.T) {
	t.Helper()
	ko := os.Getenv("SLUICE_NETDEVSIM")
	if ko == "" {
		t.Skip("SLUICE_NETDEVSIM unset: netdevsim.ko not built (scripts/vmtest.sh builds it with `sluice vm netdevsim`)")
	}
	if _, err := os.Stat("/sys/module/netdevsim"); err == nil {
		return
	}
	for _, dep := range strings.Split(strings.TrimSpace(run(t, "modinfo", "-F", "depends", ko)), ",") {
		if dep != "" {
			run(t, "modprobe", dep)
		}
	}
	run(t, "insmod", ko)
}

// nsimPorts creates a netdevsim device with n ports inside ns and returns
// the device ID and its port netdevs, in port order.
func nsimPorts(t *testing.T, l *lab, ns string, n int) (int, []string) {
	t.Helper()
	id := freeNetdevsimID()
	nsRun(t, ns, "sh", "-c", fmt.Sprintf("echo '%d %d' > /sys/bus/netdevsim/new_device", id, n))
	l.owner.Cleanup(func() {
		if err := os.WriteFile("/sys/bus/netdevsim/del_device", []byte(strconv.Itoa(id)), 0); err != nil {
			l.owner.Logf("cleanup: deleting netdevsim%d: %v", id, err)
		}
	})
	dir := fmt.Sprintf("/sys/bus/netdevsim/devices/netdevsim%d/net", id)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := try("ip", "netns", "exec", ns, "ls", dir)
		if names := strings.Fields(out); err == nil && len(names) == n {
			return id, names
		}
		if time.Now().After(deadline) {
			t.Fatalf("netdevsim%d: want %d netdevs in %s, got %q (%v)", id, n, dir, out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// doctor runs `sluice doctor --json` in ns and returns the report and the
// exit code.
func doctor(t *testing.T, ns string, args ...string) (*diag.Report, int) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, sluiceBin(t), "doctor", "--json"}, args...)...)
	out, err := cmd.Output()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("sluice doctor: %v", err)
	}
	var r diag.Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("sluice doctor --json: %v\n%s", err, out)
	}
	return &r, code
}

// result finds the result of check about subject.
func result(t *testing.T, r *diag.Report, check, subject string) diag.Result {
	t.Helper()
	for _, res := range r.Results {
		if res.Check == check && res.Subject == subject {
			return res
		}
	}
	b, _ := json.MarshalIndent(r.Results, "", "  ")
	t.Fatalf("no %s result for %q in:\n%s", check, subject, b)
	return diag.Result{}
}

func wantVerdict(t *testing.T, res diag.Result, v diag.Verdict, summary string) {
	t.Helper()
	if res.Verdict != v || !strings.Contains(res.Summary, summary) {
		t.Errorf("%s %s: %v %q, want %v containing %q\nevidence: %v\nfix: %s", res.Check, res.Subject, res.Verdict, res.Summary, v, summary, res.Evidence, res.Fix)
	}
}

func addSA(t *testing.T, ns, src, dst, spi string) {
	t.Helper()
	run(t, "ip", "-n", ns, "xfrm", "state", "add", "src", src, "dst", dst, "proto", "esp", "spi", spi,
		"reqid", spi, "mode", "tunnel", "aead", aead, keyAB, icvBits)
}

// A healthy bond: active-backup over two netdevsim ports that offload
// ESP, per-CPU-style SAs (two per peer direction). Every check that can
// run here passes; the bond itself is not probed (Linux 6.11-6.15 corrupt
// a bond's state on offloaded SA add/remove), a warning.
func TestDoctorHealthyBond(t *testing.T) {
	l := newLab(t)
	ensureNetdevsim(t)
	var ns string
	var id int
	step(t, "bond over two netdevsim ports", func(t *testing.T) {
		ns = l.netns(t)
		var ports []string
		id, ports = nsimPorts(t, l, ns, 2)
		run(t, "ip", "-n", ns, "link", "add", "bond0", "type", "bond", "mode", "active-backup", "miimon", "100")
		for _, p := range ports {
			run(t, "ip", "-n", ns, "link", "set", p, "master", "bond0")
		}
		run(t, "ip", "-n", ns, "link", "set", "bond0", "up")
		addSA(t, ns, "10.81.0.1", "10.81.0.2", "0x3001")
		addSA(t, ns, "10.81.0.1", "10.81.0.2", "0x3002")
	})
	// A bond created with `mode active-backup` starts with esp-hw-offload
	// off (bond_setup runs before the mode is set): slaves that offload
	// behind it are offload left unused.
	step(t, "doctor: the bond does not offer its slaves' offload", func(t *testing.T) {
		mustContain(t, nsRun(t, ns, "ethtool", "-k", "bond0"), "esp-hw-offload: off")
		r, _ := doctor(t, ns, "--check", "bond-offload")
		res := result(t, r, "bond-offload", "bond0")
		wantVerdict(t, res, diag.Warn, "offload ESP but the bond does not offer it")
		if !strings.Contains(res.Fix, "ethtool -K bond0 esp-hw-offload on") {
			t.Errorf("fix %q", res.Fix)
		}
	})
	step(t, "apply the fix", func(t *testing.T) {
		nsRun(t, ns, "ethtool", "-K", "bond0", "esp-hw-offload", "on", "tx-esp-segmentation", "on")
	})
	step(t, "doctor passes", func(t *testing.T) {
		r, code := doctor(t, ns, "--eswitch", "legacy")
		wantVerdict(t, result(t, r, "kernel-features", r.Results[0].Subject), diag.OK, "ESP")
		wantVerdict(t, result(t, r, "bond-offload", "bond0"), diag.OK, "bond and every slave offload ESP")
		// Linux 6.11-6.15 corrupt a bond's state when an offloaded SA is
		// added or removed on it: doctor must not probe there, and says why.
		wantVerdict(t, result(t, r, "offload-probe", "bond0"), diag.Warn, "not probed: ESP offload through a bond is broken")
		wantVerdict(t, result(t, r, "sa-per-peer", "1 peer direction(s)"), diag.OK, "several SAs")
		wantVerdict(t, result(t, r, "mlx5-steering", fmt.Sprintf("netdevsim/netdevsim%d", id)), diag.OK, "")
		for _, res := range r.Results {
			if res.Verdict == diag.Fail {
				t.Errorf("%s %s failed: %s %v", res.Check, res.Subject, res.Summary, res.Evidence)
			}
		}
		if code != 0 {
			t.Errorf("exit code %d, want 0", code)
		}
	})
	step(t, "the probe left no SA behind", func(t *testing.T) {
		if out := run(t, "ip", "-n", ns, "xfrm", "state"); strings.Contains(out, "192.0.2.1") {
			t.Fatalf("probe SA still installed:\n%s", out)
		}
	})
}

// A bond whose active slave is a veth (no ESP offload) next to a
// netdevsim port: the bond still claims esp-hw-offload, the kernel refuses
// an offloaded SA on it, a lone SA per peer, a VXLAN without MTU headroom,
// and an eswitch mode the configuration does not want.
func TestDoctorBrokenBond(t *testing.T) {
	l := newLab(t)
	ensureNetdevsim(t)
	var ns, nsim string
	var id int
	step(t, "bond over a veth and a netdevsim port", func(t *testing.T) {
		ns = l.netns(t)
		var ports []string
		id, ports = nsimPorts(t, l, ns, 1)
		nsim = ports[0]
		run(t, "ip", "-n", ns, "link", "add", "vslave", "type", "veth", "peer", "name", "vpeer")
		run(t, "ip", "-n", ns, "link", "set", "vpeer", "up") // carrier for vslave
		run(t, "ip", "-n", ns, "link", "add", "bond1", "type", "bond", "mode", "active-backup", "miimon", "100")
		run(t, "ip", "-n", ns, "link", "set", "vslave", "master", "bond1")
		run(t, "ip", "-n", ns, "link", "set", nsim, "master", "bond1")
		run(t, "ip", "-n", ns, "link", "set", "bond1", "up")
		run(t, "ip", "-n", ns, "link", "set", "bond1", "type", "bond", "active_slave", "vslave")
		// The kernel lets the bond claim ESP offload whatever its slaves
		// can do (bond_fix_features keeps the flag).
		nsRun(t, ns, "ethtool", "-K", "bond1", "esp-hw-offload", "on", "tx-esp-segmentation", "on")
		run(t, "ip", "-n", ns, "link", "add", "vx1", "type", "vxlan", "id", "7", "dev", "bond1", "dstport", "4789")
		addSA(t, ns, "10.82.0.1", "10.82.0.2", "0x4001")
	})
	step(t, "ethtool agrees the bond claims offload", func(t *testing.T) {
		mustContain(t, nsRun(t, ns, "ethtool", "-k", "bond1"), "esp-hw-offload: on")
		mustContain(t, nsRun(t, ns, "ethtool", "-k", "vslave"), "esp-hw-offload: off [fixed]")
	})
	step(t, "doctor flags every problem", func(t *testing.T) {
		r, code := doctor(t, ns, "--eswitch", "switchdev")
		wantVerdict(t, result(t, r, "bond-offload", "bond1"), diag.Fail, "bond claims esp-hw-offload but slave vslave lacks it")
		wantVerdict(t, result(t, r, "offload-probe", "bond1"), diag.Warn, "not probed: ESP offload through a bond is broken")
		wantVerdict(t, result(t, r, "mtu-headroom", "vx1"), diag.Warn, "on bond1 (MTU 1500)")
		wantVerdict(t, result(t, r, "sa-per-peer", "1 of 1 peer direction(s)"), diag.Warn, "a single SA per peer")
		wantVerdict(t, result(t, r, "mlx5-steering", fmt.Sprintf("netdevsim/netdevsim%d", id)), diag.Fail, "eswitch mode legacy, the configuration needs switchdev")
		wantVerdict(t, result(t, r, "esp-offload", nsim), diag.OK, "esp-hw-offload")
		if code != 3 {
			t.Errorf("exit code %d, want 3 (failed checks)", code)
		}
	})
	step(t, "text output names the slave and the fix", func(t *testing.T) {
		out, _ := try("ip", "netns", "exec", ns, sluiceBin(t), "doctor", "--check", "bond-offload")
		mustContain(t, out, "[FAIL] bond-offload bond1: bond claims esp-hw-offload but slave vslave lacks it", "evidence: slave vslave", "fix: replace slave vslave")
	})
	step(t, "fixed by making the offloading port the only slave", func(t *testing.T) {
		run(t, "ip", "-n", ns, "link", "set", "vslave", "nomaster")
		r, _ := doctor(t, ns, "--check", "bond-offload,offload-probe")
		wantVerdict(t, result(t, r, "bond-offload", "bond1"), diag.OK, "")
		wantVerdict(t, result(t, r, "offload-probe", "bond1"), diag.Warn, "not probed: ESP offload through a bond is broken")
	})
}

// The interface views run on the VM's own devices without error.
func TestShowInterfaceInVM(t *testing.T) {
	requireVM(t)
	bin := sluiceBin(t)
	for _, args := range [][]string{
		{"show", "interface", "topology"},
		{"show", "interface", "topology", "--json"},
		{"show", "interface", "rx-queue", "topology"},
		{"show", "interface", "rx-queue", "topology", "--json"},
	} {
		out := run(t, bin, args...)
		if strings.HasSuffix(args[len(args)-1], "json") && !json.Valid([]byte(out)) {
			t.Errorf("%v: not JSON:\n%s", args, out)
		}
		t.Logf("%v:\n%s", args, out)
	}
}
