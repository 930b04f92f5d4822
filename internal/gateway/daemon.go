// SPDX-License-Identifier: Apache-2.0

package gateway

import (
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
	if err := kernel.ApplyDaemonSched(kernel.DaemonSched{CPUs: d.CPUs, Priority: d.Priority, LockMemory: d.LockMemory}); err != nil {
		return fmt.Errorf("%s: %w", g.File, err)
	}
	log.Info("daemon settings applied", "daemon-cpu", d.CPUList, "daemon-priority", d.Priority, "lock-memory", d.LockMemory)
	return nil
}
