// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"strings"
	"testing"

	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// Seed 000's configuration (SAs offloaded to one port of the bond) warns
// with the reason and a fix fitting the kernel.
func TestDoctorBondPortOffload(t *testing.T) {
	f := healthy()
	for i := range f.States {
		f.States[i].Offload.Ifindex = 2 // p0, a port of bond0
	}
	rs := results(t, f, DoctorOptions{}, "bond-port-offload")
	if len(rs) != 1 || rs[0].Verdict != Warn || rs[0].Subject != "p0" ||
		!strings.Contains(rs[0].Summary, "4 SA(s) offloaded to p0, a port of active-backup bond bond0: the SAs are programmed into p0 only and the bond does not move them at failover") ||
		!strings.Contains(rs[0].Fix, "offload-dev: bond0") {
		t.Fatalf("%+v", rs)
	}
	f.Kernel.Release = "6.12.95"
	rs = results(t, f, DoctorOptions{}, "bond-port-offload")
	if !strings.Contains(rs[0].Fix, "on Linux 6.12.95 offload through a bond is broken too") {
		t.Errorf("6.12 fix: %s", rs[0].Fix)
	}
}

// Packet-offloaded SAs left on a port the bond failed over from fail
// the check: their traffic leaves the new active port in cleartext.
func TestDoctorBondPortPacketFailover(t *testing.T) {
	f := healthy()
	for i := range f.States {
		f.States[i].Offload.Ifindex = 2 // p0, a port of bond0
		f.States[i].Offload.Flags |= xfrm.OffloadPacket
	}
	if rs := results(t, f, DoctorOptions{}, "bond-port-offload"); rs[0].Verdict != Warn {
		t.Fatalf("on the active port: %+v", rs)
	}
	for i := range f.Netdevs {
		if f.Netdevs[i].Name == "bond0" {
			f.Netdevs[i].ActiveSlave = "p1"
		}
	}
	rs := results(t, f, DoctorOptions{}, "bond-port-offload")
	if len(rs) != 1 || rs[0].Verdict != Fail || !strings.Contains(rs[0].Summary, "4 packet-offloaded SA(s) on p0, but bond0's active port is p1") ||
		!strings.Contains(rs[0].Summary, "leaves p1 in cleartext") || !strings.Contains(rs[0].Fix, "offload-dev: bond0") || !strings.Contains(rs[0].Fix, "moves the SAs and policies to p1") {
		t.Fatalf("%+v", rs)
	}
}

// The SA table of an ixgbe PF is shared with its VFs: installed SAs on a
// VF, plus those a host.yaml adds on the PF, against 1024 Rx + 1024 Tx.
func TestDoctorSABudget(t *testing.T) {
	f := healthy()
	f.Netdevs = append(f.Netdevs,
		kernel.NetdevFacts{Name: "enp1s0f0", Index: 20, Kind: "device", Driver: "ixgbe", PCI: "0000:01:00.0"},
		kernel.NetdevFacts{Name: "enp1s0f0v0", Index: 21, Kind: "device", Driver: "ixgbevf", PCI: "0000:01:10.0"},
		kernel.NetdevFacts{Name: "eni0np1", Index: 22, Kind: "device", Driver: "netdevsim"})
	f.SAFamilies = map[string]string{"enp1s0f0": "PF 0000:01:00.0", "enp1s0f0v0": "PF 0000:01:00.0", "eni0np1": "eni0np1"}
	add := func(dev, n int, inbound bool) {
		for i := 0; i < n; i++ {
			o := &xfrm.Offload{Ifindex: dev}
			if inbound {
				o.Flags = xfrm.OffloadInbound
			}
			f.States = append(f.States, xfrm.State{Proto: xfrm.ProtoESP, SPI: uint32(0x5000 + len(f.States)), Offload: o})
		}
	}
	add(21, 800, true) // the VF's inbound SAs
	add(22, 2, false)
	rs := results(t, f, DoctorOptions{}, "sa-budget")
	if len(rs) != 2 || rs[0].Subject != "PF 0000:01:00.0" || rs[0].Verdict != OK || !strings.Contains(rs[0].Summary, "800 of 1024 Rx SAs, 0 of 1024 Tx SAs") ||
		rs[1].Subject != "eni0np1" || !strings.Contains(rs[1].Summary, "2 of 33 SAs") {
		t.Fatalf("%+v", rs)
	}
	// The host.yaml's 100 inbound SAs on the PF: 900 of 1024, above 80 %.
	var planned []PlannedSA
	for i := 0; i < 100; i++ {
		planned = append(planned, PlannedSA{Dev: "enp1s0f0", Inbound: true})
	}
	rs = results(t, f, DoctorOptions{PlannedSAs: planned}, "sa-budget")
	if rs[0].Verdict != Warn || !strings.Contains(rs[0].Summary, "900 of 1024 Rx SAs") || !strings.Contains(rs[0].Summary, "(800 installed + 100 from the configuration)") ||
		!strings.Contains(rs[0].Fix, "offload-in: crypto, offload-out: none") || !strings.Contains(strings.Join(rs[0].Evidence, " "), "enp1s0f0, enp1s0f0v0") {
		t.Fatalf("%+v", rs[0])
	}
	add(21, 300, true)
	rs = results(t, f, DoctorOptions{PlannedSAs: planned}, "sa-budget")
	if rs[0].Verdict != Fail || !strings.Contains(rs[0].Summary, "1200 of 1024 Rx SAs") {
		t.Fatalf("%+v", rs[0])
	}
}
