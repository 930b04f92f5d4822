// SPDX-License-Identifier: Apache-2.0

package config

import (
	"reflect"
	"strings"
	"testing"
)

// Seed 004's daemon settings in gateway.yaml, and their errors.
func TestGatewayDaemonSettings(t *testing.T) {
	g, err := ParseGateway([]byte(doc("daemon-cpu: 2-3", "daemon-priority: 50", "lock-memory: true", "interfaces:", "  - name: p0")), "gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := DaemonSettings{CPUs: []int{2, 3}, CPUList: "2-3", Priority: 50, LockMemory: true}
	if !reflect.DeepEqual(g.Daemon, want) {
		t.Errorf("daemon %+v, want %+v", g.Daemon, want)
	}
	g, _ = ParseGateway([]byte(doc("daemon-cpu: 0,2,4-5", "interfaces:", "  - name: p0")), "gateway.yaml")
	if !reflect.DeepEqual(g.Daemon.CPUs, []int{0, 2, 4, 5}) || g.Daemon.Priority != 0 || g.Daemon.LockMemory {
		t.Errorf("daemon %+v", g.Daemon)
	}
	for _, tc := range []struct{ line, want string }{
		{"daemon-cpu: 3-2", "gateway.yaml:1: daemon-cpu: 3-2 is not a CPU list; write CPUs as the kernel does, such as 2-3"},
		{"daemon-cpu: two", "is not a CPU list"},
		{"daemon-cpu: 400000000-400000001", "is not a CPU list"}, // past 8191, Linux's largest CPU number
		{"daemon-priority: 0", "gateway.yaml:1: daemon-priority: 0 is not a real-time priority; write 1 to 99"},
		{"daemon-priority: 120", "gateway.yaml:1: daemon-priority"},
		{"lock-memory: maybe", "gateway.yaml:1: lock-memory"},
	} {
		_, err := ParseGateway([]byte(doc(tc.line, "interfaces:", "  - name: p0")), "gateway.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.line, err, tc.want)
		}
	}
}
