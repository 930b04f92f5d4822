// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"errors"
	"fmt"
	"log/slog"

	"sluice/internal/config"
	"sluice/internal/kernel"
)

// ApplyDaemonSettings runs the daemon as gateway.yaml's daemon-cpu,
// daemon-priority and lock-memory say (the ConnectX-7 benchmark), before anything else
// starts: a setting the file asks for and the host refuses stops the
// run with the reason, rather than running differently from the file.
func ApplyDaemonSettings(g *config.Gateway, log *slog.Logger) error {
	d := g.Daemon
	if len(d.CPUs) == 0 && d.Priority == 0 && !d.LockMemory {
		return nil
	}
	// Each setting stands on its own: all are tried, every refusal is
	// reported with what the host must allow, nothing is undone.
	var errs []error
	if len(d.CPUs) > 0 {
		if err := kernel.SetProcessAffinity(d.CPUs); err != nil {
			errs = append(errs, fmt.Errorf("daemon-cpu: %w (are those CPUs online and in this cgroup's cpuset?)", err))
		}
	}
	if d.Priority > 0 {
		if err := kernel.SetProcessRR(d.Priority); err != nil {
			errs = append(errs, fmt.Errorf("daemon-priority %d: %w (needs root or CAP_SYS_NICE, and RLIMIT_RTPRIO; under systemd also no CPUSchedulingPolicy override)", d.Priority, err))
		}
	}
	if d.LockMemory {
		if err := kernel.LockProcessMemory(); err != nil {
			errs = append(errs, fmt.Errorf("lock-memory: %w (needs CAP_IPC_LOCK or a larger RLIMIT_MEMLOCK: LimitMEMLOCK=infinity under systemd)", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: %w", g.File, err)
	}
	log.Info("daemon settings applied", "daemon-cpu", d.CPUList, "daemon-priority", d.Priority, "lock-memory", d.LockMemory)
	return nil
}
