#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# PID 1 of the sluice test VM, run by busybox from the initramfs that
# internal/testlab builds (see doc.go). Per-run input comes from the control
# share (/ctl/config, /ctl/run.sh); the exit code goes back in /ctl/exit and
# between the sentinel lines on the console. Any change to this file changes
# the initramfs cache key, so it is rebuilt automatically.
export PATH=/bin

# A failure before the command starts is the harness's failure: say why on
# the console (the host quotes the console tail in its error) and power off.
die() {
	echo "sluice-init: $*"
	sync
	poweroff -f
	exit 1
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

# Decompressed 9p/netfs modules, dependencies first (order written by the
# host from modules.dep).
while read -r m; do
	insmod "/modules/$m" || die "insmod $m failed"
done </modules/order

# No udev here: the kernel's module autoloader (request_module, e.g. for
# "rfc4106(gcm(aes))" or "type bond") runs this helper, which runs the
# host's modprobe inside the chroot. Helpers resolve paths in this root.
echo /bin/sluice-modprobe >/proc/sys/kernel/modprobe

o=trans=virtio,version=9p2000.L,msize=512000
mkdir -p /ctl /newroot
mount -t 9p -o "$o" sluicectl /ctl || die "cannot mount the control share"
. /ctl/config || die "cannot read /ctl/config"
[ -n "$NONCE" ] && [ -n "$SHARE" ] || die "/ctl/config lacks NONCE or SHARE"

# cache=loose on the read-only root: every exec of ip, tc, modprobe and
# their libraries would otherwise go back to the host over 9p; caching them
# halves the smoke suite's time (32 s -> 13 s). The price: a host file that
# changes during a run may be seen stale, once read. Nothing the tests
# produce lives there: the read-write share below is uncached.
r=/newroot
mount -t 9p -o "$o,ro,cache=loose" hostroot $r || die "cannot mount the host root"
mount -t proc proc $r/proc || die "mount proc"
mount -t sysfs sysfs $r/sys || die "mount sysfs"
mount -t devtmpfs devtmpfs $r/dev || die "mount devtmpfs"
mkdir -p $r/dev/pts $r/dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts $r/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $r/dev/shm
mount -t debugfs debugfs $r/sys/kernel/debug
mount -t tracefs tracefs $r/sys/kernel/tracing 2>/dev/null
mount -t bpf -o mode=700 bpf $r/sys/fs/bpf || die "mount bpffs"
mount -t cgroup2 cgroup2 $r/sys/fs/cgroup 2>/dev/null
for d in tmp var/tmp; do
	mount -t tmpfs -o mode=1777 tmpfs $r/$d || die "mount tmpfs on /$d"
done
mount -t tmpfs -o mode=755 tmpfs $r/run || die "mount tmpfs on /run"
mkdir -p -m 1777 $r/run/lock
mount -t tmpfs -o mode=700 tmpfs $r/root || die "mount tmpfs on /root"
# /etc must be writable (ip netns, resolv.conf, strongSwan configs) but the
# host's must not change: a tmpfs copy over it. The host sends /etc as one
# tar (/ctl/etc.tar): unpacking it is much faster than copying file by file
# over 9p.
mkdir -p /etc.rw
mount -t tmpfs -o mode=755 tmpfs /etc.rw || die "mount tmpfs for /etc"
tar -xf /ctl/etc.tar -C /etc.rw || die "unpack /etc"
mount --move /etc.rw $r/etc || die "move /etc"

# The read-write share at the same path as on the host (mkdir only matters
# when that path is under one of the tmpfs mounts above).
mkdir -p "$r$SHARE" 2>/dev/null
mount -t 9p -o "$o" sluiceshare "$r$SHARE" || die "cannot mount the share at $SHARE"

hostname sluice-vm
ip link set lo up
cp /ctl/run.sh $r/run/sluice-run.sh || die "copy run.sh"

# Static keys on the receive path stay on for the guest's life. Each ping a
# test runs sets SO_TIMESTAMP and so flips netstamp_needed_key on and off,
# and every flip re-patches netif_receive_skb with int3 (text_poke_bp).
# Under multi-threaded TCG the other vCPU can still run the int3 after the
# patch is done: "Oops: int3" in netif_receive_skb, a dead guest (CI,
# 2026-12-02, TestOverlayPacketOffloadBond; docs/testing.md "The test VM").
# A ping that lives as long as the guest holds the key at one: later flips
# only count. The clsact qdisc on lo does the same for the tc ingress and
# egress keys, which flower and tc captures flip.
/bin/chroot $r /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin sh -c \
	'ping -q -i 60 127.0.0.1 >/dev/null 2>&1 & tc qdisc add dev lo clsact' ||
	die "cannot hold the receive path's static keys (ping, tc in the root)"

# Raw output: no \n -> \r\n on the serial line, so the host gets the
# command's bytes unchanged.
stty -F /dev/console -opost 2>/dev/null
echo "SLUICE-$NONCE-BEGIN"
# env -i: the command gets only what run.sh exports, not the kernel's
# environment for init.
env -i /bin/chroot $r /bin/sh /run/sluice-run.sh </dev/null
rc=$?
echo "SLUICE-$NONCE-END $rc"
echo "$rc" >/ctl/exit
sync
poweroff -f
