// SPDX-License-Identifier: Apache-2.0

package tune

import (
	"strings"
	"testing"
)

// The daemon goes on housekeeping CPUs (the ConnectX-7 benchmark's layout): never on an RX
// queue's CPU nor an isolated one (the layout text: cli's
// TestTuneDaemonLayoutText).
func TestTuneDaemonLayout(t *testing.T) {
	base := "cmdline:\n  isolcpus: managed_irq,domain,4-23\n  irqaffinity: 0-3\ninterfaces:\n  p0:\n    rx-queues: 10\n    cpus: 4-13\n  p1:\n    rx-queues: 10\n    cpus: 14-23\n"
	for _, tc := range []struct{ daemon, want string }{
		{"5", "t.yaml:1: daemon-cpus: 5 shares CPU 5 with p0's RX queues (cpus: 4-13): put the daemon on housekeeping CPUs"},
		{"2-3,30", ""},
		{"x", "t.yaml:1: daemon-cpus: \"x\": want a CPU list"},
	} {
		_, err := Parse("t.yaml", []byte("daemon-cpus: "+tc.daemon+"\n"+base))
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("daemon-cpus %s: err %v, want %q", tc.daemon, err, tc.want)
		}
	}
	_, err := Parse("t.yaml", []byte("daemon-cpus: 3-4\ncmdline:\n  isolcpus: managed_irq,domain,4-23\n"))
	if err == nil || !strings.Contains(err.Error(), "includes CPU 4, isolated by cmdline isolcpus=managed_irq,domain,4-23") {
		t.Errorf("daemon on an isolated CPU: %v", err)
	}
}
