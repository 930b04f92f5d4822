// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// NetnsCookie is the calling thread's network namespace cookie
// (SO_NETNS_COOKIE, Linux 5.14+): unlike the namespace's inode number, it
// is never reused during a boot, so state keyed by it cannot be inherited
// by a later namespace that happens to get the same inode.
func NetnsCookie() (uint64, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("netns cookie: %w", err)
	}
	defer unix.Close(fd)
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("netns cookie (SO_NETNS_COOKIE needs Linux 5.14): %w", err)
	}
	return c, nil
}
