// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

// Guests on the encrypted overlay, on the test VM's kernel: two hosts
// (namespaces) joined through a switch namespace (where the wire is
// captured), a VXLAN VNI between them encrypted by ESP; host A carries the
// guest network in Open vSwitch (ovsdb-server and ovs-vswitchd started here,
// kernel datapath, inside A's namespace) with a netdevsim VF representor
// and a veth to a guest namespace, host B in a Linux bridge with a veth to
// its guest namespace. The guests ping each other across the overlay at
// the MTU sluice computed; the wire shows only ESP.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ovsInstance is an Open vSwitch started by the test inside one namespace:
// its database, sockets and logs live in dir (OVS_RUNDIR etc.), so two
// instances in two namespaces do not meet.
type ovsInstance struct {
	ns, dir string
}

func (o ovsInstance) env() []string {
	return []string{"OVS_RUNDIR=" + o.dir, "OVS_DBDIR=" + o.dir, "OVS_LOGDIR=" + o.dir, "OVS_SYSCONFDIR=" + o.dir}
}

// cmd runs name in the instance's namespace with its environment.
func (o ovsInstance) cmd(name string, args ...string) *exec.Cmd {
	full := append([]string{"netns", "exec", o.ns, "env"}, o.env()...)
	return exec.Command("ip", append(append(full, name), args...)...)
}

func (o ovsInstance) must(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := o.cmd(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), o.ns, err, out)
	}
	return string(out)
}

// startOVS starts ovsdb-server and ovs-vswitchd in ns and stops them when
// the test ends.
func startOVS(t *testing.T, l *lab, ns string) ovsInstance {
	t.Helper()
	if _, err := exec.LookPath("ovs-vswitchd"); err != nil {
		t.Fatal("ovs-vswitchd not installed: make setup installs openvswitch-switch")
	}
	run(t, "modprobe", "openvswitch")
	run(t, "modprobe", "vport-vxlan")
	dir, err := os.MkdirTemp("", "ovs")
	if err != nil {
		t.Fatal(err)
	}
	o := ovsInstance{ns: ns, dir: dir}
	o.must(t, "ovsdb-tool", "create", filepath.Join(dir, "conf.db"), "/usr/share/openvswitch/vswitch.ovsschema")
	o.must(t, "ovsdb-server", filepath.Join(dir, "conf.db"), "--remote=punix:"+filepath.Join(dir, "db.sock"),
		"--pidfile="+filepath.Join(dir, "ovsdb-server.pid"), "--detach", "--log-file="+filepath.Join(dir, "ovsdb-server.log"))
	o.must(t, "ovs-vsctl", "--no-wait", "init")
	o.must(t, "ovs-vswitchd", "unix:"+filepath.Join(dir, "db.sock"), "--pidfile="+filepath.Join(dir, "ovs-vswitchd.pid"),
		"--detach", "--log-file="+filepath.Join(dir, "ovs-vswitchd.log"))
	l.owner.Cleanup(func() {
		for _, p := range []string{"ovs-vswitchd", "ovsdb-server"} {
			if b, err := os.ReadFile(filepath.Join(dir, p+".pid")); err == nil {
				_ = exec.Command("kill", strings.TrimSpace(string(b))).Run()
			}
		}
		time.Sleep(300 * time.Millisecond)
		os.RemoveAll(dir)
	})
	return o
}

// ovsSluice runs sluice in the OVS instance's namespace and environment.
func (o ovsInstance) sluice(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := o.cmd(sluiceBin(t), args...).CombinedOutput()
	return string(out), err
}

func (o ovsInstance) sluiceMust(t *testing.T, args ...string) string {
	t.Helper()
	out, err := o.sluice(t, args...)
	if err != nil {
		t.Fatalf("sluice %s in %s: %v\n%s", strings.Join(args, " "), o.ns, err, out)
	}
	return out
}

// guestHostFile is one host of the guest test: one uplink, the VTEP, the
// SA pair, the guest network on bridge (ovs or linux) and its guests.
func guestHostFile(name, peer string, me, other int, spiOut, spiIn, bridge, guests string) string {
	return fmt.Sprintf(`name: %s
uplinks:
  ports: [p0]
  mtu: 1600
  addresses: [192.168.70.%d/24]
vteps:
  - name: vx0
    vni: 1024
    local: 192.168.80.%d
    remotes: [{address: 192.168.80.%d, via: 192.168.70.%d}]
ipsec:
  keys: %s.keys
  peers:
    - {name: %s, local: 192.168.80.%d, remote: 192.168.80.%d, spi-out: %s, spi-in: %s}
guest-networks:
  - {name: t1, vtep: vx0, bridge: %s}
guests:
%s`, name, me, me, other, other, name, peer, me, other, spiOut, spiIn, bridge, guests)
}

func TestOverlayGuests(t *testing.T) {
	l := newLab(t)
	ensureNetdevsim(t)
	dir := t.TempDir()
	var a, b, sw, ga, gb, rep string
	var ovs ovsInstance
	var fa, fb string
	step(t, "two hosts through a switch, a guest namespace behind each, OVS in A", func(t *testing.T) {
		a, b, sw = l.netns(t), l.netns(t), l.netns(t)
		ga, gb = l.netns(t), l.netns(t)
		run(t, "ip", "-n", sw, "link", "add", "br0", "type", "bridge")
		run(t, "ip", "-n", sw, "link", "set", "br0", "up")
		for _, h := range []struct{ ns, side string }{{a, "a"}, {b, "b"}} {
			veth(t, h.ns, "p0", "", sw, h.side+"0", "")
			run(t, "ip", "-n", sw, "link", "set", h.side+"0", "mtu", "9000")
			run(t, "ip", "-n", sw, "link", "set", h.side+"0", "master", "br0")
		}
		// The guests' NICs: addresses and the guest-side MTU (1600 - 84,
		// what sluice computes for VXLAN over ESP transport).
		veth(t, ga, "eth0", "10.10.0.1/24", a, "vma", "")
		veth(t, gb, "eth0", "10.10.0.2/24", b, "vmb", "")
		for _, g := range []string{ga, gb} {
			run(t, "ip", "-n", g, "link", "set", "eth0", "mtu", "1516")
		}
		// A netdevsim PF in switchdev mode with one VF: its representor
		// joins A's OVS bridge (no traffic: netdevsim VFs have no far side).
		id, ports := nsimPorts(t, l, a, 1)
		nsRun(t, a, "devlink", "dev", "eswitch", "set", fmt.Sprintf("netdevsim/netdevsim%d", id), "mode", "switchdev")
		nsRun(t, a, "sh", "-c", "echo 1 > /sys/class/net/"+ports[0]+"/device/sriov_numvfs")
		deadline := time.Now().Add(10 * time.Second)
		for rep == "" && time.Now().Before(deadline) {
			for _, d := range strings.Fields(nsRun(t, a, "ls", "/sys/class/net")) {
				if n, err := try("ip", "netns", "exec", a, "cat", "/sys/class/net/"+d+"/phys_port_name"); err == nil && strings.TrimSpace(n) == "pf0vf0" {
					rep = d
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		if rep == "" {
			t.Fatal("netdevsim made no pf0vf0 representor")
		}
		ovs = startOVS(t, l, a)
		fa, fb = filepath.Join(dir, "node-a.yaml"), filepath.Join(dir, "node-b.yaml")
		ovWrite(t, fa, guestHostFile("node-a", "node-b", 1, 2, "0x1001", "0x1002", "ovs",
			"  - {name: ga, network: t1, attach: representor, port: vma}\n"+
				"  - {name: gr, network: t1, attach: representor, vf: {pf: "+ports[0]+", index: 0}}\n"), 0o644)
		ovWrite(t, fb, guestHostFile("node-b", "node-a", 2, 1, "0x1002", "0x1001", "linux",
			"  - {name: gb, network: t1, attach: representor, port: vmb}\n"), 0o644)
		ovWrite(t, filepath.Join(dir, "node-a.keys"), "node-b out "+ovKeyAB+"\nnode-b in "+ovKeyBA+"\n", 0o600)
		ovWrite(t, filepath.Join(dir, "node-b.keys"), "node-a out "+ovKeyBA+"\nnode-a in "+ovKeyAB+"\n", 0o600)
	})
	beforeA, beforeB := nsState(t, a), nsState(t, b)
	beforeOVS := ""
	step(t, "plan: OVS tunnel port instead of a Linux VTEP, ports at the computed MTU, after the SAs", func(t *testing.T) {
		beforeOVS = ovs.must(t, "ovs-vsctl", "show")
		out := ovs.sluiceMust(t, "plan", "-f", fa)
		t.Logf("plan A:\n%s", out)
		mustContain(t, out, "ovs-vsctl set Open_vSwitch . other_config:hw-offload=true", "ovs-vsctl add-br br-t1",
			"ovs-vsctl --may-exist add-port br-t1 vx0 -- set Interface vx0 type=vxlan options:dst_port=4789 options:key=1024 options:local_ip=192.168.80.1 options:remote_ip=192.168.80.2",
			"ip link set vma mtu 1516", "ovs-vsctl add-port br-t1 vma", "ip link set "+rep+" mtu 1516", "ovs-vsctl add-port br-t1 "+rep)
		if strings.Contains(out, "type vxlan id") {
			t.Fatalf("a Linux VXLAN device planned beside OVS's tunnel port:\n%s", out)
		}
		if strings.Index(out, "xfrm policy add") > strings.Index(out, "add-port br-t1 vx0") {
			t.Fatalf("the tunnel port comes before the policies:\n%s", out)
		}
		out = ovMust(t, b, "plan", "-f", fb)
		t.Logf("plan B:\n%s", out)
		mustContain(t, out, "ip link add vx0 type vxlan id 1024 local 192.168.80.2 remote 192.168.80.1 dstport 4789 mtu 1516",
			"ip link add br-t1 mtu 1516 type bridge", "ip link set vx0 master br-t1", "ip link set vmb mtu 1516", "ip link set vmb master br-t1")
	})
	step(t, "apply both hosts", func(t *testing.T) {
		t.Logf("A:\n%s", ovs.sluiceMust(t, "apply", "-f", fa))
		t.Logf("B:\n%s", ovMust(t, b, "apply", "-f", fb))
		show := ovs.must(t, "ovs-vsctl", "show")
		t.Logf("ovs-vsctl show:\n%s", show)
		mustContain(t, show, `Port vx0`, `type: vxlan`, `key="1024"`, `remote_ip="192.168.80.2"`, "Port vma", "Port "+rep)
		mustContain(t, ovs.must(t, "ovs-vsctl", "get", "Open_vSwitch", ".", "other_config:hw-offload"), "true")
		mustContain(t, run(t, "ip", "-n", b, "link", "show", "vmb"), "master br-t1", "mtu 1516")
	})
	step(t, "guests ping each other at full MTU, and the wire carries only ESP", func(t *testing.T) {
		// The first packets learn MACs through OVS's NORMAL action and the
		// Linux bridge; allow a few seconds under TCG.
		var out string
		var err error
		for i := 0; i < 5; i++ {
			if out, err = try("ip", "netns", "exec", ga, "ping", "-c", "2", "-W", "3", "10.10.0.2"); err == nil {
				break
			}
		}
		if err != nil {
			var dbg strings.Builder
			for _, c := range [][]string{{"ovs-appctl", "dpctl/dump-flows"}, {"ovs-appctl", "ovs/route/show"}, {"ovs-appctl", "tnl/ports/show"},
				{"ovs-appctl", "fdb/show", "br-t1"}, {"ip", "-s", "link"}, {"ip", "-s", "xfrm", "state"}, {"ip", "route"}, {"ip", "-br", "addr"}} {
				o, _ := ovs.cmd(c[0], c[1:]...).CombinedOutput()
				fmt.Fprintf(&dbg, "A$ %s\n%s\n", strings.Join(c, " "), o)
			}
			for _, c := range [][]string{{"ip", "-s", "link"}, {"ip", "-s", "xfrm", "state"}, {"bridge", "fdb", "show", "dev", "vx0"}} {
				o, _ := try("ip", append([]string{"netns", "exec", b}, c...)...)
				fmt.Fprintf(&dbg, "B$ %s\n%s\n", strings.Join(c, " "), o)
			}
			t.Fatalf("guest ping across the overlay: %v\n%s\n%s", err, out, dbg.String())
		}
		// 1516 - 28 bytes of ICMP payload with DF: the guest's full MTU
		// crosses (VXLAN + ESP fit the uplink's 1600).
		nsRun(t, ga, "ping", "-c", "2", "-W", "3", "-M", "do", "-s", "1488", "10.10.0.2")
		// tcpdump starts slowly under TCG: the ping runs long enough for
		// it to see 10 packets whenever it starts.
		wire := captureWire(t, sw, "br0", "ip", 10, func() {
			nsRun(t, ga, "ping", "-c", "20", "-i", "0.2", "-W", "3", "10.10.0.2")
		})
		var out1, out2, other int
		for _, line := range strings.Split(wire, "\n") {
			switch {
			case strings.Contains(line, "ESP(spi=0x00001001"):
				out1++
			case strings.Contains(line, "ESP(spi=0x00001002"):
				out2++
			case strings.Contains(line, " > ") && strings.Contains(line, "IPv4"):
				other++
			}
		}
		if out1 == 0 || out2 == 0 || out1+out2 < 10 || other > 0 {
			t.Fatalf("want 10 ESP packets with both SPIs and nothing else on the wire; got %d+%d ESP and %d other:\n%s", out1, out2, other, wire)
		}
	})
	step(t, "verify passes and a second apply does nothing", func(t *testing.T) {
		mustContain(t, ovs.sluiceMust(t, "verify", "-f", fa), "verify: passed")
		mustContain(t, ovMust(t, b, "verify", "-f", fb), "verify: passed")
		mustContain(t, ovs.sluiceMust(t, "apply", "-f", fa), "nothing to do")
		mustContain(t, ovMust(t, b, "apply", "-f", fb), "nothing to do")
	})
	step(t, "a guest port taken out of the bridge fails verify", func(t *testing.T) {
		ovs.must(t, "ovs-vsctl", "del-port", "br-t1", "vma")
		out, err := ovs.sluice(t, "verify", "-f", fa)
		if err == nil || !strings.Contains(out, "vma") {
			t.Fatalf("verify with vma out of br-t1: %v\n%s", err, out)
		}
		ovs.sluiceMust(t, "apply", "-f", fa)
	})
	step(t, "teardown restores both hosts and OVS", func(t *testing.T) {
		t.Logf("teardown A:\n%s", ovs.sluiceMust(t, "teardown", "-f", fa))
		t.Logf("teardown B:\n%s", ovMust(t, b, "teardown", "-f", fb))
		if after := nsState(t, b); after != beforeB {
			t.Fatalf("B after teardown differs:\nbefore:\n%s\nafter:\n%s", beforeB, after)
		}
		// OVS leaves its datapath device (ovs-system) behind once created;
		// everything else in A must be as before.
		afterA := nsState(t, a)
		var kept []string
		for _, line := range strings.Split(afterA, "\n") {
			if !strings.Contains(line, "ovs-system") {
				kept = append(kept, line)
			}
		}
		if strings.Join(kept, "\n") != beforeA {
			t.Fatalf("A after teardown differs:\nbefore:\n%s\nafter:\n%s", beforeA, afterA)
		}
		if after := ovs.must(t, "ovs-vsctl", "show"); after != beforeOVS {
			t.Fatalf("OVS after teardown differs:\nbefore:\n%s\nafter:\n%s", beforeOVS, after)
		}
		if out := ovs.must(t, "ovs-vsctl", "--if-exists", "get", "Open_vSwitch", ".", "other_config:hw-offload"); strings.TrimSpace(out) != "" {
			t.Fatalf("hw-offload left set: %q", out)
		}
	})
}
