// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Capabilities the fast path needs: loading programs and maps (CAP_BPF,
// or CAP_SYS_ADMIN on kernels before 5.8) and attaching XDP (CAP_NET_ADMIN).
const (
	capNetAdmin = 12
	capSysAdmin = 21
	capBPF      = 39
)

// CheckPrivileges says which capabilities this process lacks to load and
// attach the fast path, and how to get them. Without it a non-root user
// read cilium/ebpf's "MEMLOCK may be too low", which is not the cause on
// kernels that account BPF memory to the cgroup.
func CheckPrivileges() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil // cannot tell: let the operation say what fails
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	var missing []string
	if !has(capBPF) && !has(capSysAdmin) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(capNetAdmin) {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("the fast path needs %s, which this process (uid %d) lacks: run it as root, or grant them (systemd: AmbientCapabilities=CAP_BPF CAP_NET_ADMIN)",
		strings.Join(missing, " and "), unix.Geteuid())
}
