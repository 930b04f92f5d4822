// SPDX-License-Identifier: Apache-2.0

package diag

import "sluice/internal/kernel"

// withGuests adds to a healthy host a guest that passes the guest checks:
// vCPUs on CPUs of their own, the vhost worker and the NIC's interrupts
// elsewhere, a tap at the VTEP's MTU in the guest network's bridge, a
// passed-through VF on vfio-pci.
func withGuests(f *Facts) *Facts {
	f.Netdevs = append(f.Netdevs,
		kernel.NetdevFacts{Name: "br-t1", Index: 20, Kind: "bridge", MTU: 8850},
		kernel.NetdevFacts{Name: "vx1", Index: 21, Kind: "vxlan", MTU: 8850, Lower: "bond0", Master: "br-t1"},
		kernel.NetdevFacts{Name: "vnet0", Index: 22, Kind: "tun", MTU: 8850, Master: "br-t1"})
	f.Guests = &GuestFacts{
		Guests: []GuestProc{{PID: 100, Name: "vm1", Cmdline: "qemu-system-x86_64 -name guest=vm1 -device vfio-pci,host=0000:31:00.2",
			VCPUs: map[string]string{"CPU 0/KVM": "20", "CPU 1/KVM": "22"}, Vhost: map[string]string{"vhost-100": "16"}}},
		NICIRQs: []IRQ{{Num: 40, Name: "mlx5_comp0@pci:0000:31:00.0", Affinity: "2", Effective: "2"}},
		VFs:     []VFFact{{PF: "p0", PFDriver: "mlx5_core", Index: 0, PCI: "0000:31:00.2", Driver: "vfio-pci"}},
	}
	return f
}
