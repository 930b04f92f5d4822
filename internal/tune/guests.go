// SPDX-License-Identifier: Apache-2.0

package tune

import (
	"fmt"
	"slices"
	"strings"

	"sluice/internal/diag"
)

// guestCPUs maps each CPU a running guest's vCPU or vhost thread may run
// on to who runs there ("vm1 CPU 0/KVM"). Seed 001: a NIC queue's softirq
// on a vCPU's CPU takes that vCPU's time; so does a vhost worker.
func (h *Host) guestCPUs() map[int]string {
	// An unreadable /proc/interrupts is no reason to skip the guests.
	g, _ := diag.GatherGuests(h.FS, nil)
	if g == nil {
		return nil
	}
	out := map[int]string{}
	for _, p := range g.Guests {
		name := p.Name
		if name == "" {
			name = fmt.Sprintf("qemu pid %d", p.PID)
		}
		for _, m := range []map[string]string{p.VCPUs, p.Vhost} {
			for th, list := range m {
				set, err := diag.ParseCPUList(list)
				if err != nil || len(set) > 64 {
					continue // unpinned (all CPUs): doctor's guest-cpus says so
				}
				for _, c := range set.Sorted() {
					out[c] = name + " " + th
				}
			}
		}
	}
	return out
}

// checkIRQCPUs refuses a profile that pins interface name's queue IRQs to
// CPUs a guest's vCPUs or vhost threads run on.
func (h *Host) checkIRQCPUs(name string, cpus []int) error {
	busy := h.guestCPUs()
	var clash []string
	for _, c := range cpus {
		if who, ok := busy[c]; ok {
			clash = append(clash, fmt.Sprintf("CPU %d runs %s", c, who))
		}
	}
	if len(clash) == 0 {
		return nil
	}
	var taken []int
	for c := range busy {
		taken = append(taken, c)
	}
	slices.Sort(taken)
	return fmt.Errorf("interfaces.%s.cpus: %s; keep the NIC's queue IRQs off the guests' vCPUs and vhost threads (the VM single-flow guide: their softirqs take the vCPU's time): choose CPUs other than %s", name, strings.Join(clash, ", "), intsList(taken))
}

func intsList(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = itoa(x)
	}
	return strings.Join(s, ",")
}
