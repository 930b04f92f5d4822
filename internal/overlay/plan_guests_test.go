// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/diag"
	"sluice/internal/kernel"
)

// seed000Guests is the ConnectX-6 SR-IOV guide's node A with its VM: VF 0 of p0 passed
// through, its representor p0_0 in OVS bridge br-ovs with the VXLAN port,
// the MTU fitted to a 4 KiB page.
func seed000Guests() string {
	return seedHost("none", "") + `sriov:
  - {pf: p0, vfs: 2, eswitch: switchdev}
guest-networks:
  - {name: tenant-a, vtep: vxlan1, bridge-name: br-ovs, page-fit: true}
guests:
  - name: vm1
    network: tenant-a
    attach: vf-passthrough
    vf: {pf: p0, index: 0}
    mac: 02:00:00:00:00:01
    trust: true
    spoofchk: false
    vcpus: 4
    memory-mib: 8192
`
}

// guestLive is matchingLive with VF 0 of p0 (bound to mlx5_core, alone in
// IOMMU group 12, representor p0_0), Open vSwitch running without
// bridges, and a two-node topology with the NIC on node 0.
func guestLive(t *testing.T) *Live {
	l := matchingLive(t)
	l.Links = l.Links[:len(l.Links)-1] // OVS carries vxlan1: no Linux device
	l.Links[1].VFs = []kernel.VFConfig{{Index: 0, MAC: "00:00:00:00:00:00", SpoofChk: true}, {Index: 1}}
	l.NumVFs = map[string]int{"p0": 2}
	l.Links[1].Bus, l.Links[1].Device = "pci", "0000:03:00.0"
	l.Eswitch = map[string]string{"pci/0000:03:00.0": "switchdev"}
	l.Links = append(l.Links, kernel.LinkConfig{Name: "p0_0", Index: 9, MTU: 1500})
	l.Guests = &GuestLive{Bridges: map[string][]string{}, Ifaces: map[string]OVSIface{}, Domains: map[string]bool{},
		VFs: map[string]VFLive{"p0/0": {PCI: "0000:03:00.2", Driver: "mlx5_core", IOMMUGroup: "12", Representor: "p0_0"}}}
	l.Topology = &diag.Topology{Nodes: []diag.NUMANode{
		{Node: 0, CPUs: "0-7", Devices: []diag.PCIDevice{{Address: "0000:03:00.0", NUMANode: 0, Netdevs: []string{"p0"}}}},
		{Node: 1, CPUs: "8-15"},
	}}
	return l
}

func commandsOf(p *Plan) string {
	var b strings.Builder
	for _, s := range p.Steps {
		for _, c := range s.Commands {
			b.WriteString(c + "\n")
		}
	}
	return b.String()
}

func TestPlanGuestsSeed000(t *testing.T) {
	DefaultGuestDir = t.TempDir()
	h, ks := load(t, seed000Guests())
	p, err := NewPlan(h, ks, guestLive(t))
	if err != nil {
		t.Fatal(err)
	}
	cmds := commandsOf(p)
	want := []string{
		"ovs-vsctl set Open_vSwitch . other_config:hw-offload=true",
		"ovs-vsctl add-br br-ovs",
		"ovs-vsctl --may-exist add-port br-ovs vxlan1 -- set Interface vxlan1 type=vxlan options:dst_port=4789 options:key=1024 options:local_ip=192.168.80.2 options:remote_ip=192.168.80.3",
		"ip link set p0 vf 0 mac 02:00:00:00:00:01 trust on spoofchk off",
		"ip link set p0_0 mtu 3986",
		"ovs-vsctl add-port br-ovs p0_0",
		"ip link set p0_0 up",
		"modprobe vfio-pci",
		"echo vfio-pci > /sys/bus/pci/devices/0000:03:00.2/driver_override",
		"echo 0000:03:00.2 > /sys/bus/pci/drivers/mlx5_core/unbind",
		"echo 0000:03:00.2 > /sys/bus/pci/drivers_probe",
		"cat > " + filepath.Join(DefaultGuestDir, "vm1.xml") + " <<'EOF'\n<domain type=",
		"<hostdev mode=\"subsystem\" type=\"pci\" managed=\"no\">",
	}
	last := -1
	for _, w := range want {
		i := strings.Index(cmds, w)
		if i < 0 {
			t.Fatalf("missing %q in:\n%s", w, cmds)
		}
		if i < last {
			t.Errorf("%q out of order in:\n%s", w, cmds)
		}
		last = i
	}
	if strings.Contains(cmds, "type vxlan") {
		t.Errorf("a Linux VXLAN device planned beside OVS's tunnel port:\n%s", cmds)
	}
	// The bridge comes only after the policies: no guest frame leaves
	// before encryption exists.
	if stepIndex(p, "ovs-vsctl add-br") < stepIndex(p, "ip route add 192.168.80.3/32") {
		t.Error("guest bridge planned before the VTEP route")
	}
	notes := strings.Join(p.Notes, "\n")
	for _, w := range []string{"MTU 3986 fits a 4096-byte page", "0000:03:00.2 is alone in IOMMU group 12",
		"vCPUs pinned to CPUs 4,5,6,7 of NUMA node 0", "inside the guest set `ip link set dev <nic> mtu 3986`"} {
		if !strings.Contains(notes, w) {
			t.Errorf("notes lack %q:\n%s", w, notes)
		}
	}
}

func TestPlanGuestsAppliedIsEmpty(t *testing.T) {
	DefaultGuestDir = t.TempDir()
	h, ks := load(t, seed000Guests())
	l := guestLive(t)
	p, err := NewPlan(h, ks, l)
	if err != nil {
		t.Fatal(err)
	}
	// The host as apply leaves it.
	l.Guests.HWOffload = "true"
	l.Guests.Bridges["br-ovs"] = []string{"vxlan1", "p0_0"}
	l.Guests.Ifaces["vxlan1"] = OVSIface{Type: "vxlan", Options: map[string]string{"dst_port": "4789", "key": "1024", "local_ip": "192.168.80.2", "remote_ip": "192.168.80.3"}}
	l.Links[1].VFs[0] = kernel.VFConfig{Index: 0, MAC: "02:00:00:00:00:01", Trust: true}
	l.Links[len(l.Links)-1].MTU, l.Links[len(l.Links)-1].Up = 3986, true
	vf := l.Guests.VFs["p0/0"]
	vf.Driver = "vfio-pci"
	l.Guests.VFs["p0/0"] = vf
	// The XML the first plan would write (its hostdev does not depend on
	// the driver).
	for _, s := range p.Steps {
		if strings.HasPrefix(s.Object, "domain XML") {
			if err := s.run(&runner{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	p2, err := NewPlan(h, ks, l)
	if err != nil {
		t.Fatal(err)
	}
	if !p2.Empty() {
		t.Fatalf("second plan not empty:\n%s", commandsOf(p2))
	}
}

func TestPlanGuestsLinuxBridgeVirtio(t *testing.T) {
	DefaultGuestDir = t.TempDir()
	body := seedHost("none", "") + `guest-networks:
  - {name: t1, vtep: vxlan1, bridge: linux}
guests:
  - {name: ns1, network: t1, attach: representor, port: veth-g1}
  - name: vm2
    network: t1
    attach: virtio
    mac: 02:00:00:00:01:02
    numa-node: 1
    vcpus: 2
    poll-us: 200
`
	body = strings.Replace(body, "    mtu: 3986\n", "", 1)
	h, ks := load(t, body)
	l := matchingLive(t)
	l.Links[len(l.Links)-1].MTU = 9132
	l.Links = append(l.Links, kernel.LinkConfig{Name: "veth-g1", Index: 10, Kind: "veth", MTU: 1500})
	l.Topology = guestLive(t).Topology
	p, err := NewPlan(h, ks, l)
	if err != nil {
		t.Fatal(err)
	}
	cmds := commandsOf(p)
	for _, w := range []string{"ip link add br-t1 mtu 9132 type bridge", "ip link set vxlan1 master br-t1", "ip link set br-t1 up",
		"ip link set veth-g1 mtu 9132", "ip link set veth-g1 master br-t1", "ip link set veth-g1 up"} {
		if !strings.Contains(cmds, w+"\n") {
			t.Errorf("missing %q in:\n%s", w, cmds)
		}
	}
	if strings.Contains(cmds, "ovs-vsctl") || strings.Contains(cmds, "vfio") {
		t.Errorf("OVS or vfio steps for a Linux bridge and virtio:\n%s", cmds)
	}
	g := &h.Guests[1]
	d, err := NewDomain(g, h.GuestNetwork("t1"), nil, 9132, l.Topology)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := d.XML()
	for _, w := range []string{`<source bridge="br-t1"></source>`, `<driver name="vhost" queues="2" rx_queue_size="1024" tx_queue_size="1024">`,
		`<mtu size="9132">`, `<vcpupin vcpu="0" cpuset="14">`, `<vcpupin vcpu="1" cpuset="15">`, `<emulatorpin cpuset="8">`,
		`<iothreadpin iothread="1" cpuset="8">`, `<memory mode="strict" nodeset="1">`, `<qemu:arg value="netdev.hostnet0.poll-us=200">`} {
		if !strings.Contains(x, w) {
			t.Errorf("XML lacks %s:\n%s", w, x)
		}
	}
	if strings.Contains(x, "openvswitch") {
		t.Errorf("openvswitch virtualport on a Linux bridge:\n%s", x)
	}
}

func TestPlanGuestsRefusals(t *testing.T) {
	DefaultGuestDir = t.TempDir()
	h, ks := load(t, strings.Replace(seed000Guests(), "page-fit: true", "mtu: 4000", 1))
	_, err := NewPlan(h, ks, guestLive(t))
	if err == nil || !strings.Contains(err.Error(), "guest-networks[0] (tenant-a): mtu 4000 is more than the VTEP vxlan1 carries (3986") {
		t.Errorf("oversized network MTU: %v", err)
	}
	h, ks = load(t, seed000Guests())
	l := guestLive(t)
	l.Guests.OVSErr = "ovs-vsctl list-br: exit status 1: database connection failed"
	vf := l.Guests.VFs["p0/0"]
	vf.Representor = ""
	l.Guests.VFs["p0/0"] = vf
	_, err = NewPlan(h, ks, l)
	for _, w := range []string{"bridge: ovs needs Open vSwitch running: ovs-vsctl list-br", "VF 0 of p0 has no representor to join br-ovs"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("want %q, got %v", w, err)
		}
	}
	// No IOMMU: planned, and the plan says vfio-pci will refuse it.
	h, ks = load(t, seed000Guests())
	l = guestLive(t)
	vf = l.Guests.VFs["p0/0"]
	vf.IOMMUGroup, vf.GroupPeers = "", nil
	l.Guests.VFs["p0/0"] = vf
	p, err := NewPlan(h, ks, l)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Join(p.Notes, "\n"); !strings.Contains(n, "0000:03:00.2 is in no IOMMU group: the IOMMU is off") {
		t.Errorf("notes: %s", n)
	}
	vf.IOMMUGroup, vf.GroupPeers = "7", []string{"0000:03:00.3"}
	l.Guests.VFs["p0/0"] = vf
	p, _ = NewPlan(h, ks, l)
	if n := strings.Join(p.Notes, "\n"); !strings.Contains(n, "IOMMU group 7 holds 0000:03:00.3 besides 0000:03:00.2") {
		t.Errorf("notes: %s", n)
	}
}

func TestTeardownGuests(t *testing.T) {
	h, _ := load(t, seed000Guests())
	l := guestLive(t)
	l.Guests.HWOffload = "true"
	l.Guests.Bridges["br-ovs"] = []string{"vxlan1", "p0_0"}
	j := &Journal{path: "/run/sluice/overlay/x.json",
		Created: []entry{{Kind: kindOVSBridge, Name: "br-ovs"}, {Kind: kindOVSPort, Name: "vxlan1", Link: "br-ovs"}, {Kind: kindOVSPort, Name: "p0_0", Link: "br-ovs"}},
		Changed: []entry{{Kind: kindOVSConfig, Name: "hw-offload", Old: "", New: "true"}, {Kind: kindDriver, Name: "0000:03:00.2", Old: "mlx5_core", New: "vfio-pci"}}}
	p := NewTeardown(h, l, j, true)
	cmds := commandsOf(p)
	want := []string{"echo > /sys/bus/pci/devices/0000:03:00.2/driver_override", "ovs-vsctl del-port br-ovs p0_0", "ovs-vsctl del-port br-ovs vxlan1",
		"ovs-vsctl del-br br-ovs", "ovs-vsctl remove Open_vSwitch . other_config hw-offload"}
	last := -1
	for _, w := range want {
		i := strings.Index(cmds, w)
		if i < last || i < 0 {
			t.Fatalf("%q missing or out of order in:\n%s", w, cmds)
		}
		last = i
	}
}

// TestDomainXMLValidates runs libvirt's own schema check on the domains
// sluice writes for the ConnectX-6 SR-IOV guide (VF passthrough) and the VM single-flow guide (virtio on OVS).
func TestDomainXMLValidates(t *testing.T) {
	if _, err := exec.LookPath("virt-xml-validate"); err != nil {
		t.Skip("virt-xml-validate not installed (libvirt-clients; make setup installs it)")
	}
	h, _ := load(t, seed000Guests()+`  - name: vm2
    network: tenant-a
    attach: virtio
    cpus: [2, 3]
    emulator-cpus: [1]
    numa-node: 0
    poll-us: 200
    kernel: /boot/vmlinuz
    initrd: /boot/initrd.img
    cmdline: console=ttyS0
    disk: /var/lib/libvirt/images/vm2.qcow2
`)
	l := guestLive(t)
	for i := range h.Guests {
		d, err := NewDomain(&h.Guests[i], h.GuestNetwork("tenant-a"), l.Guests.VFs, 3986, l.Topology)
		if err != nil {
			t.Fatal(err)
		}
		x, _ := d.XML()
		f := filepath.Join(t.TempDir(), "d.xml")
		if err := os.WriteFile(f, []byte(x), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("virt-xml-validate", f, "domain").CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v: %s\n%s", h.Guests[i].Name, err, out, x)
		}
	}
}
