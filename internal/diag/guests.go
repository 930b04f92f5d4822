// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"sluice/internal/kernel"
)

// Guests: what the VM single-flow guide found by staring at top and /proc/interrupts, as
// checks. A vCPU thread that shares its CPU with a vhost thread or with a
// NIC queue's interrupt loses half its time to it; a guest MTU without
// room for the host's encapsulation makes the host segment in software; a
// VF whose representor is in no bridge reaches nothing; a VF a guest uses
// must be bound to vfio-pci.

// GuestFacts is what the guest checks read.
type GuestFacts struct {
	// Guests are the running QEMU processes.
	Guests []GuestProc `json:"guests,omitempty"`
	// NICIRQs are the interrupts of physical NICs (PCI netdevs).
	NICIRQs []IRQ `json:"nic_irqs,omitempty"`
	// VFs are the VFs of the PCI NICs, with their driver and representor.
	VFs []VFFact `json:"vfs,omitempty"`
	// PortNames maps netdevs to their phys_port_name (representors:
	// pf0vf1).
	PortNames map[string]string `json:"port_names,omitempty"`
}

// GuestProc is one QEMU process: its vCPU threads and vhost workers with
// the CPUs each may run on.
type GuestProc struct {
	PID     int    `json:"pid"`
	Name    string `json:"name"`
	Cmdline string `json:"cmdline"`
	// VCPUs maps "CPU N/KVM" to its allowed CPUs; Vhost maps
	// "vhost-PID" workers (threads of QEMU since Linux 6.4, kernel threads
	// before) likewise.
	VCPUs map[string]string `json:"vcpus"`
	Vhost map[string]string `json:"vhost,omitempty"`
}

// VFFact is one VF of a PF.
type VFFact struct {
	PF       string `json:"pf"`
	PFDriver string `json:"pf_driver"`
	Index    int    `json:"index"`
	PCI      string `json:"pci"`
	Driver   string `json:"driver"`
}

func init() {
	Checks = append(Checks,
		Check{"guest-cpus", "guest vCPUs apart from vhost threads and NIC interrupts", checkGuestCPUs},
		Check{"guest-mtu", "guest ports leave room for the VTEP's encapsulation", checkGuestMTU},
		Check{"guest-vf", "VF representors in a segment, VFs on the right driver", checkGuestVFs},
	)
}

var qemuNameRE = regexp.MustCompile(`-name\x00(?:guest=)?([^,\x00]+)`)

// GatherGuests reads QEMU processes, NIC interrupts and VFs through fs.
func GatherGuests(fs FS, netdevs []kernel.NetdevFacts) (*GuestFacts, error) {
	g := &GuestFacts{PortNames: map[string]string{}}
	allowed := func(dir string) string {
		s, _ := fs.ReadString(dir + "/status")
		for _, l := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	kthreads := map[string]string{} // vhost-PID kernel threads (Linux < 6.4)
	for _, p := range fs.Names("/proc") {
		pid, err := strconv.Atoi(p)
		if err != nil {
			continue
		}
		comm, _ := fs.ReadString("/proc/" + p + "/comm")
		if strings.HasPrefix(comm, "vhost-") {
			kthreads[comm] = allowed("/proc/" + p)
		}
		if !strings.HasPrefix(comm, "qemu-system") && !strings.HasPrefix(comm, "qemu-kvm") {
			continue
		}
		cmd, _ := fs.ReadString("/proc/" + p + "/cmdline")
		gp := GuestProc{PID: pid, Cmdline: strings.ReplaceAll(cmd, "\x00", " "), VCPUs: map[string]string{}, Vhost: map[string]string{}}
		if m := qemuNameRE.FindStringSubmatch(cmd); m != nil {
			gp.Name = m[1]
		}
		for _, tid := range fs.Names("/proc/" + p + "/task") {
			dir := "/proc/" + p + "/task/" + tid
			tc, _ := fs.ReadString(dir + "/comm")
			switch {
			case strings.HasPrefix(tc, "CPU ") && strings.HasSuffix(tc, "/KVM"):
				gp.VCPUs[tc] = allowed(dir)
			case strings.HasPrefix(tc, "vhost-"):
				gp.Vhost[tc] = allowed(dir)
			}
		}
		g.Guests = append(g.Guests, gp)
	}
	for i := range g.Guests {
		want := "vhost-" + strconv.Itoa(g.Guests[i].PID)
		if c, ok := kthreads[want]; ok {
			g.Guests[i].Vhost[want] = c
		}
	}
	irqs, err := readInterrupts(fs)
	if err != nil {
		return g, err
	}
	seen := map[int]bool{}
	for _, n := range netdevs {
		if s, err := fs.ReadString("/sys/class/net/" + n.Name + "/phys_port_name"); err == nil && s != "" {
			g.PortNames[n.Name] = s
		}
		if n.PCI == "" {
			continue
		}
		for _, names := range fs.Names("/sys/bus/pci/devices/" + n.PCI + "/msi_irqs") {
			if k, err := strconv.Atoi(names); err == nil && irqs[k] != nil && !seen[k] {
				seen[k] = true
				g.NICIRQs = append(g.NICIRQs, *irqs[k])
			}
		}
		for _, e := range fs.Names("/sys/bus/pci/devices/" + n.PCI) {
			idx, ok := strings.CutPrefix(e, "virtfn")
			if !ok {
				continue
			}
			i, err := strconv.Atoi(idx)
			if err != nil {
				continue
			}
			vf := VFFact{PF: n.Name, PFDriver: n.Driver, Index: i, PCI: fs.LinkBase("/sys/bus/pci/devices/" + n.PCI + "/" + e)}
			vf.Driver = fs.LinkBase("/sys/bus/pci/devices/" + vf.PCI + "/driver")
			if !slices.ContainsFunc(g.VFs, func(v VFFact) bool { return v.PCI == vf.PCI }) {
				g.VFs = append(g.VFs, vf)
			}
		}
	}
	slices.SortFunc(g.NICIRQs, func(a, b IRQ) int { return a.Num - b.Num })
	return g, nil
}

func cpus(s string) CPUSet {
	c, _ := ParseCPUList(s)
	return c
}

func checkGuestCPUs(f *Facts, _ *DoctorOptions) []Result {
	if f.Guests == nil || len(f.Guests.Guests) == 0 {
		return []Result{{Verdict: Skip, Summary: "no running QEMU guest"}}
	}
	var rs []Result
	for _, g := range f.Guests.Guests {
		var ev []string
		var clash []string
		names := slices.Sorted(maps.Keys(g.VCPUs))
		for _, v := range names {
			vc := cpus(g.VCPUs[v])
			ev = append(ev, fmt.Sprintf("%s on CPUs %s", v, vc))
			for _, h := range slices.Sorted(maps.Keys(g.Vhost)) {
				if x := vc.Intersect(cpus(g.Vhost[h])); len(x) > 0 {
					clash = append(clash, fmt.Sprintf("%s shares CPUs %s with %s", v, x, h))
				}
			}
			for _, irq := range f.Guests.NICIRQs {
				eff := irq.eff
				if eff == nil {
					eff = cpus(irq.Effective)
				}
				if x := vc.Intersect(eff); len(x) > 0 {
					clash = append(clash, fmt.Sprintf("%s shares CPU %s with IRQ %d (%s)", v, x, irq.Num, irq.Name))
				}
			}
		}
		for _, h := range slices.Sorted(maps.Keys(g.Vhost)) {
			ev = append(ev, fmt.Sprintf("%s on CPUs %s", h, g.Vhost[h]))
		}
		subj := g.Name
		if subj == "" {
			subj = "qemu pid " + strconv.Itoa(g.PID)
		}
		if len(clash) > 0 {
			rs = append(rs, Result{Verdict: Fail, Subject: subj, Summary: fmt.Sprintf("%d vCPU/CPU conflicts: %s", len(clash), strings.Join(clash, "; ")),
				Evidence: ev, Fix: "pin the vCPUs to CPUs of their own (vcpupin), the emulator and vhost threads elsewhere (emulatorpin; the VM single-flow guide), and move the NIC's queue IRQs off the vCPUs' CPUs (sluice tune, or echo CPU > /proc/irq/N/smp_affinity_list)"})
			continue
		}
		rs = append(rs, Result{Verdict: OK, Subject: subj, Summary: "no vCPU shares a CPU with a vhost thread or a NIC interrupt", Evidence: ev})
	}
	return rs
}

// checkGuestMTU: in a Linux bridge that holds a VXLAN or Geneve port,
// every other port (tap, representor, veth) must have at most the VTEP's
// MTU, which mtu-headroom checks against the underlay: a bigger guest
// frame cannot be encapsulated without fragmentation or software GSO.
func checkGuestMTU(f *Facts, _ *DoctorOptions) []Result {
	var rs []Result
	for _, vt := range f.Netdevs {
		if (vt.Kind != "vxlan" && vt.Kind != "geneve") || vt.Master == "" || vt.Master == "ovs-system" {
			continue
		}
		for _, p := range f.Netdevs {
			if p.Master != vt.Master || p.Name == vt.Name {
				continue
			}
			ev := []string{fmt.Sprintf("%s MTU %d and VTEP %s MTU %d in bridge %s", p.Name, p.MTU, vt.Name, vt.MTU, vt.Master)}
			if p.MTU > vt.MTU {
				rs = append(rs, Result{Verdict: Fail, Subject: p.Name, Summary: fmt.Sprintf("guest MTU %d leaves no headroom: the VTEP %s carries %d; the host segments or drops every larger frame (the VM single-flow guide)", p.MTU, vt.Name, vt.MTU),
					Evidence: ev, Fix: fmt.Sprintf("ip link set %s mtu %d, and the same MTU inside the guest (sluice mtu shows the arithmetic)", p.Name, vt.MTU)})
			} else {
				rs = append(rs, Result{Verdict: OK, Subject: p.Name, Summary: fmt.Sprintf("MTU %d fits VTEP %s (%d)", p.MTU, vt.Name, vt.MTU), Evidence: ev})
			}
		}
	}
	if len(rs) == 0 {
		return []Result{{Verdict: Skip, Summary: "no Linux bridge with a VXLAN or Geneve port (OVS guest ports: see sluice verify)"}}
	}
	return rs
}

var repNameRE = regexp.MustCompile(`^(?:c\d+)?pf\d+vf(\d+)$`)

func checkGuestVFs(f *Facts, _ *DoctorOptions) []Result {
	if f.Guests == nil {
		return []Result{{Verdict: Skip, Summary: "guest facts not gathered"}}
	}
	var rs []Result
	for _, n := range f.Netdevs {
		pn := f.Guests.PortNames[n.Name]
		if !repNameRE.MatchString(pn) {
			continue
		}
		if n.Master == "" {
			rs = append(rs, Result{Verdict: Warn, Subject: n.Name, Summary: fmt.Sprintf("representor of VF %s is in no bridge: its VF's guest reaches no segment", pn),
				Evidence: []string{fmt.Sprintf("%s phys_port_name %s, no master", n.Name, pn)},
				Fix:      fmt.Sprintf("add it to the guest network's bridge (ovs-vsctl add-port BRIDGE %s, or ip link set %s master BRIDGE); host.yaml guests: does it on apply", n.Name, n.Name)})
			continue
		}
		rs = append(rs, Result{Verdict: OK, Subject: n.Name, Summary: fmt.Sprintf("representor of VF %s is in %s", pn, n.Master)})
	}
	for _, vf := range f.Guests.VFs {
		subj := fmt.Sprintf("%s vf %d (%s)", vf.PF, vf.Index, vf.PCI)
		var user string
		for _, g := range f.Guests.Guests {
			if strings.Contains(g.Cmdline, "host="+vf.PCI) || strings.Contains(g.Cmdline, "host="+strings.TrimPrefix(vf.PCI, "0000:")) ||
				strings.Contains(g.Cmdline, `"host":"`+vf.PCI+`"`) {
				user = g.Name
			}
		}
		switch {
		case user != "" && vf.Driver != "vfio-pci":
			rs = append(rs, Result{Verdict: Fail, Subject: subj, Summary: fmt.Sprintf("guest %s uses this VF but it is bound to %s, not vfio-pci", user, driverOrNone(vf.Driver)),
				Fix: fmt.Sprintf("echo vfio-pci > /sys/bus/pci/devices/%s/driver_override; echo %s > /sys/bus/pci/drivers/%s/unbind; echo %s > /sys/bus/pci/drivers_probe (sluice apply does this for vf-passthrough guests)", vf.PCI, vf.PCI, vf.Driver, vf.PCI)})
		case vf.Driver != "" && vf.Driver != "vfio-pci" && vf.Driver != vf.PFDriver:
			rs = append(rs, Result{Verdict: Warn, Subject: subj, Summary: fmt.Sprintf("bound to %s: neither vfio-pci (passthrough) nor the PF's driver %s", vf.Driver, vf.PFDriver),
				Fix: fmt.Sprintf("echo %s > /sys/bus/pci/drivers/%s/unbind, then bind it to vfio-pci or %s", vf.PCI, vf.Driver, vf.PFDriver)})
		default:
			rs = append(rs, Result{Verdict: OK, Subject: subj, Summary: "bound to " + driverOrNone(vf.Driver)})
		}
	}
	if len(rs) == 0 {
		return []Result{{Verdict: Skip, Summary: "no VF and no representor"}}
	}
	return rs
}

func driverOrNone(s string) string {
	if s == "" {
		return "no driver"
	}
	return s
}
