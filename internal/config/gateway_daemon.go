// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Seed 004's daemon settings (fastSwan's daemon-cpu, daemon-priority,
// lock-memory), applied by `sluice gateway run` to itself at start.
const (
	// MaxDaemonPriority is the highest real-time priority (SCHED_RR 1-99).
	MaxDaemonPriority = 99
)

// DaemonSettings is how the gateway daemon runs.
type DaemonSettings struct {
	// CPUs pins every thread of the daemon to these CPUs (daemon-cpu:
	// the housekeeping CPUs of tune's layout, never an RX queue's).
	CPUs []int
	// CPUList is CPUs as written.
	CPUList string
	// Priority, 1-99, runs the daemon's threads with real-time SCHED_RR
	// at that priority (0: the normal scheduler). The ConnectX-7 benchmark writes 50,
	// outside nice's -20..19: a real-time priority.
	Priority int
	// LockMemory locks the daemon's pages in RAM (mlockall current and
	// future), so a page fault never delays the mirror under memory
	// pressure.
	LockMemory bool
}

// maxCPUs bounds CPU numbers as diag.MaxCPUs does (x86-64's largest
// NR_CPUS): a long list of wide ranges must not build billions of entries.
const maxCPUs = 8192

// parseCPUList reads the kernel's CPU list format ("2-3", "0,2,4-7").
func parseCPUList(s string) ([]int, bool) {
	var out []int
	seen := map[int]bool{}
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a >= maxCPUs {
			return nil, false
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b >= maxCPUs {
				return nil, false
			}
		}
		for c := a; c <= b; c++ {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	return out, len(out) > 0
}

// cpuList is daemon-cpu: CPUs in the kernel's list format.
type cpuList struct {
	cpus []int
	list string
}

func (c *cpuList) UnmarshalYAML(n *yaml.Node) error {
	s, err := scalar(n, "a CPU list such as 2-3")
	if err != nil {
		return err
	}
	cpus, ok := parseCPUList(s)
	if !ok {
		return leafErr(n, "%s is not a CPU list; write CPUs as the kernel does, such as 2-3 or 0,2-3 (the ConnectX-7 benchmark pins the daemon to its housekeeping CPUs 2-3)", show(s))
	}
	*c = cpuList{cpus: cpus, list: s}
	return nil
}

// rtPriority is daemon-priority (1-99, SCHED_RR).
type rtPriority = num[rtPriorityRule]

type rtPriorityRule struct{}

func (rtPriorityRule) Max() uint64 { return MaxDaemonPriority }
func (rtPriorityRule) Refuse(v uint64) string {
	if v == 0 {
		return fmt.Sprintf("0 is not a real-time priority; write 1 to %d (the ConnectX-7 benchmark: 50), or leave daemon-priority out for the normal scheduler", MaxDaemonPriority)
	}
	return ""
}
