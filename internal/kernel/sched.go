// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// DaemonSched is how a daemon process runs: CPU affinity, real-time
// priority and locked memory (the ConnectX-7 benchmark's daemon-cpu, daemon-priority,
// lock-memory).
type DaemonSched struct {
	CPUs       []int
	Priority   int // SCHED_RR priority 1-99; 0 leaves the scheduler alone
	LockMemory bool
}

// ApplyDaemonSched applies s to every thread of the calling process.
// Affinity and scheduling policy are per thread in Linux: each existing
// thread (/proc/self/task) is set, and threads created later inherit them
// from their creator. SCHED_RR rather than SCHED_FIFO: the Go runtime
// runs several threads at the same priority, and round-robin lets them
// share a CPU instead of one starving the rest. Memory is locked with
// mlockall(MCL_CURRENT|MCL_FUTURE) (needs CAP_IPC_LOCK or a large enough
// RLIMIT_MEMLOCK). Each failure is reported with the fix; nothing is
// undone (each setting stands on its own).
func ApplyDaemonSched(s DaemonSched) error {
	var errs []error
	tids, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("listing this process's threads: %w", err)
	}
	if len(s.CPUs) > 0 {
		var set unix.CPUSet
		for _, c := range s.CPUs {
			set.Set(c)
		}
		for _, t := range tids {
			tid, _ := strconv.Atoi(t.Name())
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("daemon-cpu: sched_setaffinity(%v): %w (are those CPUs online and in this cgroup's cpuset?)", s.CPUs, err))
				break
			}
		}
	}
	if s.Priority > 0 {
		for _, t := range tids {
			tid, _ := strconv.Atoi(t.Name())
			if err := schedSetRR(tid, s.Priority); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("daemon-priority %d: sched_setscheduler(SCHED_RR): %w (needs root or CAP_SYS_NICE, and RLIMIT_RTPRIO; under systemd also no CPUSchedulingPolicy override)", s.Priority, err))
				break
			}
		}
	}
	if s.LockMemory {
		if err := unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE); err != nil {
			errs = append(errs, fmt.Errorf("lock-memory: mlockall: %w (needs CAP_IPC_LOCK or a larger RLIMIT_MEMLOCK: LimitMEMLOCK=infinity under systemd)", err))
		}
	}
	return errors.Join(errs...)
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
