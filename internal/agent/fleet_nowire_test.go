// SPDX-License-Identifier: Apache-2.0

//go:build !vmtest

package agent_test

import "testing"

// startWire exists in the VM build only (fleet_vm_test.go): the host
// kernel has no ESP to carry traffic with.
func startWire(t *testing.T, _ string) meshTraffic {
	t.Fatal("traffic needs ESP: run TestFleetMeshESP in the VM (scripts/vmtest.sh)")
	return nil
}
