// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// NewNetNS gives each call its own named namespace, and the cleanup removes
// it: a leaked namespace would collide with the next run's and pile up
// under /run/netns.
func TestNewNetNSCleansUp(t *testing.T) {
	var names []string
	t.Run("make", func(t *testing.T) {
		a, ha := NewNetNS(t)
		b, _ := NewNetNS(t)
		if a == b || !ha.IsOpen() {
			t.Fatalf("two namespaces %q %q (open %v)", a, b, ha.IsOpen())
		}
		out, err := exec.Command("ip", "-n", a, "link", "show", "lo").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "lo:") {
			t.Fatalf("ip -n %s: %v\n%s", a, err, out)
		}
		names = []string{a, b}
	})
	for _, n := range names {
		if _, err := os.Stat("/run/netns/" + n); !os.IsNotExist(err) {
			t.Errorf("namespace %s still exists after its test: %v", n, err)
		}
	}
}

// freshRunNetnsEnv marks the child run of TestNewNetNSOnAFreshBoot.
const freshRunNetnsEnv = "SLUICE_TEST_FRESH_RUN_NETNS"

// On a new boot /run/netns is a plain directory until the first `ip netns
// add`, which bind-mounts it onto itself and so shadows whatever was
// mounted into it before. A namespace NewNetNS made before that must still
// delete cleanly (issue 36: five EBUSY deletes on a new CI machine). The
// test reruns itself in a private mount namespace with a new tmpfs on /run,
// which is that state, and leaves the host's /run alone.
func TestNewNetNSOnAFreshBoot(t *testing.T) {
	RequireRoot(t, "mounts a tmpfs on /run in a private mount namespace")
	if os.Getenv(freshRunNetnsEnv) == "" {
		cmd := exec.Command("unshare", "--mount", "--propagation", "private",
			os.Args[0], "-test.run=^TestNewNetNSOnAFreshBoot$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), freshRunNetnsEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestNewNetNSOnAFreshBoot/before_the_first_ip_netns_add") {
			t.Fatalf("in a private mount namespace with a new /run: %v\n%s", err, out)
		}
		return
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatalf("tmpfs on /run: %v", err)
	}
	var name string
	t.Run("before the first ip netns add", func(t *testing.T) {
		name, _ = NewNetNS(t)
		probe := fmt.Sprintf("sluice-probe%d", os.Getpid())
		for _, args := range [][]string{{"netns", "add", probe}, {"netns", "del", probe}} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %v: %v\n%s", args, err, out)
			}
		}
	})
	if _, err := os.Stat("/run/netns/" + name); !os.IsNotExist(err) {
		t.Errorf("namespace %s still exists after its test: %v%s", name, err, mountsHolding("/run/netns/"+name))
	}
}
