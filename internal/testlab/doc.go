// SPDX-License-Identifier: Apache-2.0

// Package testlab runs commands inside a throwaway qemu VM that boots a
// Debian kernel, for the tests that need kernel features the host lacks
// (ESP/GCM, bonding, 802.1Q, geneve, tc flower, netdevsim, loadable modules).
//
// Design, and why:
//
//   - No disk image. The guest's root filesystem is the host's own "/",
//     shared read-only over virtio-9p, so every tool and library installed on
//     the host (iproute2, ethtool, strongSwan, test binaries) exists in the
//     guest at the same path with nothing to build or keep in sync. The
//     directory under test (Options.Share, by default the repository) is
//     shared a second time read-write and mounted at the same path, so paths
//     to binaries and result files are identical in host and guest. The
//     root is mounted with cache=loose (executables and libraries are read
//     once, not on every exec: the smoke suite runs 2.5x faster), so a host
//     file changed during a run can look stale in the guest; the share is
//     uncached, so what the guest writes there is on the host at once.
//   - A tiny initramfs, built and cached by this package (initramfs.go), is
//     PID 1: busybox-static plus the few 9p modules the kernel needs to reach
//     its root, decompressed (busybox insmod cannot read .ko.xz) and loaded
//     in dependency order from modules.dep. It mounts the host root, gives it
//     fresh proc/sys/dev/bpffs/debugfs, tmpfs on the writable places (/tmp,
//     /run, /var/tmp, /root) and a tmpfs copy of /etc, then chroots into it
//     and runs the command. There is no udev or systemd: the kernel's
//     module-autoload helper is pointed at a script that runs the host's
//     modprobe inside the chroot, which is what makes "ip xfrm state add"
//     or "ip link add type bond" load their modules on demand.
//   - A third 9p share, a per-run host temp dir, carries the control files:
//     the command script in, the exit code out. The exit code is also
//     printed between random per-run sentinel lines on the serial console;
//     the host passes only the bytes between the sentinels to
//     Options.Stdout, so kernel and init noise never reach the caller.
//   - qemu runs with TCG (software emulation): /dev/kvm here is kvm-pvm and
//     unusable. q35 rather than microvm because microvm hung in about one
//     boot in six. Boot to the first command takes 4-5 s on an idle host
//     (the host's /etc goes over as one tar: copying it file by file over
//     9p took 3.5 s more), and two to four times that when the host's CPUs
//     are busy.
//   - netdevsim is not built in Debian kernels; NetdevsimModule builds it
//     out of tree from linux-source against the installed headers and
//     caches it per kernel version. Run passes its path to the guest as
//     SLUICE_NETDEVSIM.
package testlab
