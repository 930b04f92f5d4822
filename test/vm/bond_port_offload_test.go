// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

// Seed 000's configuration on the VM's kernel: the SA offloaded to one
// port of an active-backup bond (offload dev PF0), then a failover. What
// Linux 6.12 does (bond_main.c, xfrm_device.c): the bond re-offloads at
// failover only the SAs added on the bond itself (bond_ipsec_add_sa_all);
// an SA added on a port stays on that port. And xfrm_dev_offload_ok
// offloads a crypto SA's packets only when the route's device is the SA's
// device: through bond0, transmit is never offloaded to the port.

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/diag"
)

// nsimLink joins two netdevsim ports as if cabled (6.12's link_device:
// "netnsfd:ifindex netnsfd:ifindex").
func nsimLink(t *testing.T, nsA, devA, nsB, devB string) {
	t.Helper()
	ia := strings.TrimSpace(nsRun(t, nsA, "cat", "/sys/class/net/"+devA+"/ifindex"))
	ib := strings.TrimSpace(nsRun(t, nsB, "cat", "/sys/class/net/"+devB+"/ifindex"))
	run(t, "sh", "-c", fmt.Sprintf("exec 3</run/netns/%s 4</run/netns/%s; echo '3:%s 4:%s' > /sys/bus/netdevsim/link_device", nsA, nsB, ia, ib))
}

// waitActive waits until ns's bond0 has port as its active port.
func waitActive(t *testing.T, ns, port string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for activeSlave(t, ns) != port {
		if time.Now().After(deadline) {
			t.Fatalf("bond0 in %s: active port %q, want %s", ns, activeSlave(t, ns), port)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// activeSlave reads the bond's active port from /proc/net/bonding.
func activeSlave(t *testing.T, ns string) string {
	t.Helper()
	for _, l := range strings.Split(nsRun(t, ns, "cat", "/proc/net/bonding/bond0"), "\n") {
		if v, ok := strings.CutPrefix(l, "Currently Active Slave: "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func bondPortHost(name string, ports []string, me, other int, offload string) string {
	s := fmt.Sprintf(`name: %s
uplinks:
  ports: [%s, %s]
  bond: {name: bond0, miimon: 100, primary: %s}
  addresses: [10.89.0.%d/24]
ipsec:
  keys: %s.keys
  peers:
    - name: peer
      local: 10.89.0.%d
      remote: 10.89.0.%d
      spi-out: 0x%d001
      spi-in: 0x%d001
`, name, ports[0], ports[1], ports[0], me, name, me, other, me, other)
	if offload != "" {
		s += "      offload: " + offload + "\n      offload-dev: " + ports[0] + "\n"
	}
	return s
}

func TestOverlayBondPortOffloadFailover(t *testing.T) {
	l := newLab(t)
	ensureNetdevsim(t)
	dir := t.TempDir()
	var a, b string
	var aid int
	var ap, bp []string
	step(t, "two hosts, each a bond over two netdevsim ports, cabled port to port", func(t *testing.T) {
		a, b = l.netns(t), l.netns(t)
		aid, ap = nsimPorts(t, l, a, 2)
		_, bp = nsimPorts(t, l, b, 2)
		nsimLink(t, a, ap[0], b, bp[0])
		nsimLink(t, a, ap[1], b, bp[1])
		ovWrite(t, filepath.Join(dir, "a.keys"), "peer out "+ovKeyAB+"\npeer in "+ovKeyBA+"\n", 0o600)
		ovWrite(t, filepath.Join(dir, "b.keys"), "peer out "+ovKeyBA+"\npeer in "+ovKeyAB+"\n", 0o600)
		ovWrite(t, filepath.Join(dir, "a.yaml"), bondPortHost("a", ap, 1, 2, "crypto"), 0o644)
		ovWrite(t, filepath.Join(dir, "b.yaml"), bondPortHost("b", bp, 2, 1, ""), 0o644)
	})
	af, bf := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	step(t, "plan warns: an SA on a bond port does not follow a failover", func(t *testing.T) {
		out := ovMust(t, a, "plan", "-f", af)
		t.Logf("%s", out)
		mustContain(t, out, "offload-dev "+ap[0]+" is a port of active-backup bond bond0", "the bond does not move them at failover")
	})
	step(t, "apply both hosts", func(t *testing.T) {
		t.Logf("%s", ovMust(t, a, "apply", "-f", af))
		ovMust(t, b, "apply", "-f", bf)
		mustContain(t, nsimIPsec(t, aid, 0), "SA count=2")
		mustContain(t, nsimIPsec(t, aid, 1), "SA count=0")
	})
	ping := func(t *testing.T) {
		t.Helper()
		nsRun(t, a, "ping", "-c", "3", "-i", "0.2", "-W", "2", "10.89.0.2")
	}
	step(t, "traffic through the bond: encrypted, but not by the port's NIC", func(t *testing.T) {
		before, _, _ := saStats(t, a, "10.89.0.1", "10.89.0.2", "0x1001")
		ping(t)
		after, _, _ := saStats(t, a, "10.89.0.1", "10.89.0.2", "0x1001")
		if after-before < 3 {
			t.Fatalf("outbound SA counted %d packets for 3 pings", after-before)
		}
		// netdevsim counts the packets it was handed for offloaded
		// encryption: none, since the route's device is bond0, not the
		// SA's port (xfrm_dev_offload_ok), so ESP was done in software.
		mustContain(t, nsimIPsec(t, aid, 0), "SA count=2 tx=0")
	})
	step(t, "doctor warns about the SA on a bond port, with the fix", func(t *testing.T) {
		r, _ := doctor(t, a, "--check", "bond-port-offload,sa-budget,offload-probe")
		// netdevsim offloads crypto in both modes and directions, no packet:
		// the probe reports it per capability.
		wantVerdict(t, result(t, r, "offload-probe", ap[1]), diag.Warn, "crypto offload only (both directions, both modes): packet offload refused")
		res := result(t, r, "bond-port-offload", ap[0])
		wantVerdict(t, res, diag.Warn, "2 SA(s) offloaded to "+ap[0]+", a port of active-backup bond bond0")
		if !strings.Contains(res.Fix, "offload: none") {
			t.Errorf("fix %q", res.Fix)
		}
		wantVerdict(t, result(t, r, "sa-budget", ap[0]), diag.OK, "2 of 33 SAs")
	})
	step(t, "carrier loss on port 0 (the peer's port goes down): both bonds move to port 1", func(t *testing.T) {
		run(t, "ip", "-n", b, "link", "set", bp[0], "down")
		waitActive(t, a, ap[1])
		waitActive(t, b, bp[1])
	})
	step(t, "after the failover: the SAs stayed on port 0, traffic goes on in software", func(t *testing.T) {
		mustContain(t, nsimIPsec(t, aid, 0), "SA count=2")
		mustContain(t, nsimIPsec(t, aid, 1), "SA count=0 tx=0")
		before, _, _ := saStats(t, a, "10.89.0.1", "10.89.0.2", "0x1001")
		ping(t)
		after, _, _ := saStats(t, a, "10.89.0.1", "10.89.0.2", "0x1001")
		if after-before < 3 {
			t.Fatalf("outbound SA counted %d packets for 3 pings after failover", after-before)
		}
		mustContain(t, nsimIPsec(t, aid, 1), "SA count=0 tx=0")
		mustContain(t, run(t, "ip", "-n", a, "xfrm", "state"), "crypto offload parameters: dev "+ap[0]+" dir out")
	})
	step(t, "back to port 0, then port 0 taken down by hand: the kernel deletes its SAs", func(t *testing.T) {
		run(t, "ip", "-n", b, "link", "set", bp[0], "up")
		waitActive(t, a, ap[0])
		waitActive(t, b, bp[0])
		run(t, "ip", "-n", a, "link", "set", ap[0], "down")
		waitActive(t, a, ap[1])
		waitActive(t, b, bp[1])
		// xfrm_dev_down flushes the SAs offloaded to a device going down.
		if s := run(t, "ip", "-n", a, "xfrm", "state"); strings.Contains(s, "0x00001001") {
			t.Fatalf("the SA offloaded to %s survived the port going down (a kernel without xfrm_dev_down's flush?): update docs/overlay.md\n%s", ap[0], s)
		}
		mustContain(t, nsimIPsec(t, aid, 0), "SA count=0")
		if out, err := try("ip", "netns", "exec", a, "ping", "-c", "2", "-i", "0.2", "-W", "1", "10.89.0.2"); err == nil {
			t.Fatalf("traffic passed without its SA (the policy should drop it):\n%s", out)
		}
		out, err := ovSluice(t, a, "verify", "-f", af)
		if err == nil || !strings.Contains(out, "is missing") {
			t.Fatalf("verify after the SAs were flushed: %v\n%s", err, out)
		}
	})
	step(t, "teardown", func(t *testing.T) {
		ovMust(t, a, "teardown", "-f", af)
		ovMust(t, b, "teardown", "-f", bf)
	})
}
