// SPDX-License-Identifier: Apache-2.0

package config

import (
	"strings"
	"testing"
)

// hostGuestsSeed000 adds the ConnectX-6 SR-IOV guide's VM to its host A: VF 0 passed through
// to vm1, its representor in an OVS bridge with the VXLAN port, the MTU
// fitted to a 4 KiB page.
var hostGuestsSeed000 = hostSeed000 + lines(
	"guest-networks:",
	"  - {name: tenant-a, vtep: vxlan1, bridge-name: br-ovs, page-fit: false}",
	"guests:",
	"  - name: vm1",
	"    network: tenant-a",
	"    attach: vf-passthrough",
	"    vf: {pf: enp3s0f0np0, index: 0}",
	"    mac: 02:00:00:00:00:01",
	"    trust: true",
	"    spoofchk: false",
	"    vcpus: 16",
	"    memory-mib: 8192",
	"  - name: vm2",
	"    network: tenant-a",
	"    attach: virtio",
	"    cpus: [20, 22]",
	"    emulator-cpus: [16]",
	"    poll-us: 200",
)

func TestParseHostGuests(t *testing.T) {
	h, err := ParseHost([]byte(hostGuestsSeed000), "host.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := h.GuestNetwork("tenant-a")
	if n == nil || n.Bridge != BridgeOVS || n.BridgeName != "br-ovs" || n.VTEP != "vxlan1" {
		t.Fatalf("network %+v", n)
	}
	g := h.Guests[0]
	if g.Attach != AttachVFPassthrough || g.VF == nil || g.VF.PF != "enp3s0f0np0" || g.VF.Index != 0 || *g.Trust != true || *g.SpoofChk != false || g.VCPUs != 16 || g.MemoryMiB != 8192 {
		t.Fatalf("vm1 %+v", g)
	}
	if g.QueueSize != 0 {
		t.Fatalf("vm1 is no virtio guest, queue size %d", g.QueueSize)
	}
	g = h.Guests[1]
	if g.VCPUs != 2 || g.QueueSize != DefaultQueueSize || g.MemoryMiB != DefaultGuestMemoryMiB || g.PollUS != 200 || len(g.EmulatorCPUs) != 1 {
		t.Fatalf("vm2 defaults %+v", g)
	}
}

func TestParseHostGuestErrors(t *testing.T) {
	vtep := lines("vteps:", "  - {name: vx0, vni: 10, local: 10.0.0.1, remotes: [10.0.0.2]}")
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"unknown vtep", vtep + lines("guest-networks:", "  - {name: a, vtep: vx9}"),
			[]string{"f.yaml:4: guest-networks[0].vtep: vx9 is not one of vteps[]"}},
		{"vtep twice", vtep + lines("guest-networks:", "  - {name: a, vtep: vx0}", "  - {name: b, vtep: vx0}"),
			[]string{"f.yaml:5: guest-networks[1].vtep: vx0 already carries guest network a"}},
		{"bridge name too long", vtep + lines("guest-networks:", "  - {name: tenant-abcdefgh, vtep: vx0}"),
			[]string{"f.yaml:4: guest-networks[0].name: the default bridge name br-tenant-abcdefgh is longer than 15 bytes"}},
		{"bridge kind", vtep + lines("guest-networks:", "  - {name: a, vtep: vx0, bridge: macvtap}"),
			[]string{`f.yaml:4: guest-networks[0].bridge: "macvtap" is not valid; use one of ovs (default) or linux`}},
		{"bridge named like the vtep", vtep + lines("guest-networks:", "  - {name: a, vtep: vx0, bridge-name: vx0}"),
			[]string{"f.yaml:4: guest-networks[0].bridge-name: vx0 is already used by vteps[0].name"}},
		{"page-fit and mtu", vtep + lines("guest-networks:", "  - name: a", "    vtep: vx0", "    page-fit: true", "    mtu: 1400"),
			[]string{"f.yaml:6: guest-networks[0].page-fit: page-fit computes the MTU and mtu: sets it"}},
		{"guest problems", vtep + lines("guest-networks:", "  - {name: a, vtep: vx0}", "guests:",
			"  - name: vm1",
			"    network: b",
			"    attach: vf-passthrough",
			"    port: eth9",
			"  - name: vm2",
			"    network: a",
			"    attach: virtio",
			"    vlan: 5",
			"    queue-size: 300",
			"    cpus: [1, 2, 2]",
			"    emulator-cpus: [2]",
			"  - {name: vm3, network: a}",
			"  - {name: vm4, network: a, attach: representor}",
		),
			[]string{
				"f.yaml:7: guests[0].network: b is not one of guest-networks",
				"f.yaml:6: guests[0].vf: missing; name the VF to pass through",
				"f.yaml:9: guests[0].port: only applies to attach: representor",
				"f.yaml:13: guests[1].vlan: only applies to attach: vf-passthrough",
				"f.yaml:14: guests[1].queue-size: 300: virtio queues are 256, 512 or 1024",
				"f.yaml:15: guests[1].cpus: CPU 2 is listed twice",
				"f.yaml:16: guests[1].emulator-cpus: CPU 2 also runs a vCPU",
				"f.yaml:17: guests[2].attach: missing; say how the guest's NIC attaches",
				"f.yaml:18: guests[3].vf: attach: representor needs exactly one of vf:",
			}},
		{"legacy eswitch", lines("sriov:", "  - {pf: p0, vfs: 2, eswitch: legacy}") + vtep + lines("guest-networks:", "  - {name: a, vtep: vx0}", "guests:",
			"  - {name: vm1, network: a, attach: vf-passthrough, vf: {pf: p0, index: 2}}"),
			[]string{"f.yaml:8: guests[0].vf: p0 is in eswitch legacy mode", "f.yaml:8: guests[0].vf: VF 2 does not exist with vfs: 2"}},
		{"vf shared", vtep + lines("guest-networks:", "  - {name: a, vtep: vx0}", "guests:",
			"  - {name: vm1, network: a, attach: vf-passthrough, vf: {pf: p0, index: 1}}",
			"  - {name: vm2, network: a, attach: representor, vf: {pf: p0, index: 1}}"),
			[]string{"f.yaml:7: guests[1].vf: VF 1 of p0 is already guest vm1's"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseHost([]byte(tc.doc), "f.yaml")
			if err == nil {
				t.Fatal("parsed")
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("missing %q in:\n%s", w, msg)
				}
			}
		})
	}
}
