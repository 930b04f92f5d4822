// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// The settings a daemon process runs with (gateway.yaml's daemon-cpu,
// daemon-priority and lock-memory). Affinity and scheduling policy are
// per thread in Linux: each existing thread (/proc/self/task) is set, and
// threads created later inherit them from their creator. The errors say
// which call failed and the errno; what to change on the host is the
// caller's to say (it knows the setting's name).

// SetProcessAffinity pins every thread of this process to cpus.
func SetProcessAffinity(cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return eachThread(func(tid int) error {
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("sched_setaffinity(%v): %w", cpus, err)
		}
		return nil
	})
}

// SetProcessRR runs every thread of this process with SCHED_RR at prio
// (1-99). SCHED_RR rather than SCHED_FIFO: the Go runtime runs several
// threads at the same priority, and round-robin lets them share a CPU
// instead of one starving the rest.
func SetProcessRR(prio int) error {
	return eachThread(func(tid int) error {
		if err := schedSetRR(tid, prio); err != nil {
			return fmt.Errorf("sched_setscheduler(SCHED_RR): %w", err)
		}
		return nil
	})
}

// LockProcessMemory locks this process's memory, now and later
// (mlockall(MCL_CURRENT|MCL_FUTURE)).
func LockProcessMemory() error {
	if err := unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE); err != nil {
		return fmt.Errorf("mlockall: %w", err)
	}
	return nil
}

// eachThread runs set on each thread of this process and stops at the
// first failure; a thread that exited meanwhile (ESRCH) is no failure.
func eachThread(set func(tid int) error) error {
	tids, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("listing this process's threads: %w", err)
	}
	for _, t := range tids {
		tid, _ := strconv.Atoi(t.Name())
		if err := set(tid); err != nil && !errors.Is(err, unix.ESRCH) {
			return err
		}
	}
	return nil
}

// schedSetRR is sched_setscheduler(tid, SCHED_RR, prio) (x/sys/unix has
// sched_setattr, which takes the same policy and priority).
func schedSetRR(tid, prio int) error {
	return unix.SchedSetAttr(tid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_RR, Priority: uint32(prio)}, 0)
}

// ThreadSched is one thread's affinity and scheduling, for reports and
// tests.
type ThreadSched struct {
	TID      int
	CPUs     []int
	Policy   uint32 // unix.SCHED_*
	Priority uint32
}

// ReadThreadSched reads every thread of process pid (0: this one).
func ReadThreadSched(pid int) ([]ThreadSched, error) {
	dir := "/proc/self/task"
	if pid != 0 {
		dir = fmt.Sprintf("/proc/%d/task", pid)
	}
	tids, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []ThreadSched
	for _, t := range tids {
		tid, _ := strconv.Atoi(t.Name())
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil {
			continue // exited
		}
		attr, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			continue
		}
		ts := ThreadSched{TID: tid, Policy: attr.Policy, Priority: attr.Priority}
		for c := 0; c < 1024; c++ {
			if set.IsSet(c) {
				ts.CPUs = append(ts.CPUs, c)
			}
		}
		out = append(out, ts)
	}
	return out, nil
}

// SchedRR is SCHED_RR's number, for comparing ThreadSched.Policy.
const SchedRR = unix.SCHED_RR
