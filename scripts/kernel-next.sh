#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The second test kernel (issue 32): the newest Linux Debian ships (trixie-backports, 7.3 today) and a
# Debian trixie root for it, cached under /var/cache/sluice/next. Nothing is installed on the host:
#   - apt reads trixie and trixie-backports through lists of its own (Dir::State::Lists,
#     Dir::Cache, Dir::Etc::SourceList under $NEXT/apt); the machine's lists and caches stay bookworm's;
#   - the kernel's packages are fetched with apt-get download and unpacked (dpkg -x) into the root,
#     which carries its own /boot/vmlinuz-*, /lib/modules/<release> and headers;
#   - the root is made by debootstrap (trixie: glibc 2.41, gcc 14, the toolchain the 7.3 headers
#     need) with iproute2, strongSwan 6 and the tools the VM tests run; internal/testlab boots the
#     7.3 kernel over this root (SLUICE_VM_KERNEL=next) and builds netdevsim and the NIC model in it.
# Idempotent: each phase is skipped when its result is there. Prints each phase's time.
# `make setup` starts it in the background (log: /var/cache/sluice/kernel-next.log) and `make test`'s
# vmtest-next-subset runs it again, which waits on its lock ($NEXT.lock) for that build and then
# finds everything done.
#
#   bash scripts/kernel-next.sh            # everything
#   NEXT_KERNEL_SERIES=7.3 bash scripts/kernel-next.sh
#   SLUICE_NEXT_DIR=/var/tmp/next bash scripts/kernel-next.sh   # a root elsewhere (the VM boots only the default)
set -euo pipefail

NEXT=${SLUICE_NEXT_DIR:-/var/cache/sluice/next}
SERIES=${NEXT_KERNEL_SERIES:-7.3}
ROOT=$NEXT/root
log() { printf 'kernel-next: %s\n' "$*"; }
now() { date +%s; }
phase() { log "$1: $(( $(now) - $2 ))s"; }

[ "$(id -u)" = 0 ] || { echo "kernel-next: run as root (debootstrap, chroot)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "kernel-next: debootstrap missing (make setup installs it)" >&2; exit 1; }

# One build of a root at a time: a second run (make test's, while make setup's background build
# goes on) waits here, then finds every phase done.
mkdir -p "$(dirname "$NEXT")"
exec 9>"$NEXT.lock"
if ! flock -n 9; then
  log "waiting for the build of $NEXT that holds $NEXT.lock (make setup's: /var/cache/sluice/kernel-next.log)"
  t=$(now)
  flock -x 9
  phase "waited for the other build" "$t"
fi

uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$uri" ] || uri=http://deb.debian.org/debian
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

# 1. apt lists of trixie and trixie-backports, apart from the machine's.
mkdir -p "$NEXT/apt/lists/partial" "$NEXT/apt/cache" "$NEXT/apt/archives/partial" "$NEXT/debs"
cat >"$NEXT/apt/sources.list" <<SRC
deb [signed-by=$keyring] $uri trixie main
deb [signed-by=$keyring] $uri trixie-backports main
SRC
APT=(-o "Dir::Etc::SourceList=$NEXT/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null -o APT::Sandbox::User=root
  -o "Dir::State::Lists=$NEXT/apt/lists" -o "Dir::Cache=$NEXT/apt/cache"
  -o "Dir::Cache::Archives=$NEXT/apt/archives" -o Dir::State::status=/dev/null)
t=$(now)
if [ -z "$(find "$NEXT/apt/lists" -maxdepth 1 -name '*trixie-backports*Packages' -mmin -1440 2>/dev/null)" ]; then
  apt-get "${APT[@]}" update -q >/dev/null
fi
phase "apt lists (trixie, trixie-backports)" "$t"

# The newest kernel of the series in trixie-backports: linux-image-<release> names it.
release=$(apt-cache "${APT[@]}" search --names-only "^linux-image-${SERIES//./\\.}\.[0-9]+\+[a-z0-9]+-amd64\$" 2>/dev/null |
  awk '{print $1}' | sed 's/^linux-image-//' | sort -V | tail -1)
[ -n "$release" ] || { echo "kernel-next: no linux-image-$SERIES.* in trixie-backports" >&2; exit 1; }
ver=${release%-amd64}          # 7.3.4+deb13
log "kernel $release"

# 2. The kernel's packages, downloaded only (the image is split into base, binary and modules).
t=$(now)
pkgs=(linux-base-$release linux-binary-$release linux-modules-$release
  linux-headers-$release linux-headers-$ver-common linux-kbuild-$ver linux-source-$SERIES)
( cd "$NEXT/debs"
  for p in "${pkgs[@]}"; do
    ls "${p}"_*.deb >/dev/null 2>&1 || apt-get "${APT[@]}" download -q -t trixie-backports "$p" >/dev/null
  done )
phase "kernel packages downloaded ($(du -sh "$NEXT/debs" | cut -f1))" "$t"

# 3. The trixie root: the toolchain for the headers (gcc-14, make, pahole, libelf, libssl), kmod for
#    the guest's module loading, and what the VM tests run (iproute2, ethtool, tcpdump, strongSwan 6).
t=$(now)
if [ ! -x "$ROOT/usr/sbin/swanctl" ]; then
  rm -rf "$ROOT.new"
  mkdir -p "$NEXT"
  include=gcc-14,make,libc6-dev,libelf-dev,libssl-dev,pahole,bc,bison,flex,kmod,xz-utils,zstd,ca-certificates
  include+=,iproute2,ethtool,tcpdump,iputils-ping,iperf3,procps,psmisc,nftables,python3-minimal
  include+=,strongswan,strongswan-swanctl,charon-systemd,libcharon-extra-plugins
  include+=,libstrongswan-standard-plugins,libstrongswan-extra-plugins,strongswan-pki
  log "debootstrap trixie into $ROOT (nice -n 10)"
  nice -n 10 debootstrap --variant=minbase --include="$include" trixie "$ROOT.new" "$uri" >"$NEXT/debootstrap.log" 2>&1 ||
    { tail -20 "$NEXT/debootstrap.log" >&2; exit 1; }
  rm -rf "$ROOT"
  mv "$ROOT.new" "$ROOT"
fi
phase "trixie root ($(du -sh "$ROOT" 2>/dev/null | cut -f1))" "$t"

# Commands in the root: apt's maintainer scripts and objtool (read_stack_limit) read /proc, so the
# chroot gets a proc of its own, in a private mount namespace that vanishes with the command (as
# internal/testlab's runIn does).
in_root() { unshare --mount --propagation private sh -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$ROOT" "$@"; }

# 3b. strongSwan from sid (6.1; trixie's 6.0.1 predates per-CPU SAs and packet offload's fixes, which
#     need 6.0.2). The root gets sid as a source pinned to priority 100, so nothing else moves to sid by
#     itself; `apt-get install -t sid` takes strongSwan's packages from sid and, of their dependencies,
#     only what trixie cannot satisfy (libstrongswan needs glibc >= 2.42: libc6, libc6-dev, libc-bin).
#     The downloaded packages stay in the root's apt cache; the phase is skipped once charon is 6.1.
t=$(now)
SWAN_SUITE=${NEXT_SWAN_SUITE:-sid}
SWAN_SERIES=${NEXT_SWAN_SERIES:-6.1}
swan_ver() { chroot "$ROOT" dpkg-query -W -f='${Version}' strongswan-charon 2>/dev/null || true; }
if [[ "$(swan_ver)" != "$SWAN_SERIES".* ]]; then
  echo "deb [signed-by=$keyring] $uri $SWAN_SUITE main" >"$ROOT/etc/apt/sources.list.d/sluice-$SWAN_SUITE.list"
  printf 'Package: *\nPin: release n=%s\nPin-Priority: 100\n' "$SWAN_SUITE" >"$ROOT/etc/apt/preferences.d/sluice-$SWAN_SUITE"
  # Every strongSwan package the root has moves together (they depend on one libstrongswan version),
  # and strongswan-charon replaces charon-systemd (they conflict): internal/swan runs
  # /usr/lib/ipsec/charon, as on the host, which debootstrap's strongswan (charon-systemd in 6.x)
  # does not bring.
  mapfile -t swan_pkgs < <(chroot "$ROOT" dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' |
    awk '$1 == "ii" && $2 ~ /strongswan|charon/ && $2 != "charon-systemd" {print $2}')
  swan_pkgs+=(strongswan-charon charon-systemd-)
  # The machine's mirror may serve a sid whose Release has expired (it does here: the host's apt sets
  # Check-Valid-Until false too); the signature is still checked.
  in_root env DEBIAN_FRONTEND=noninteractive apt-get -q -o Acquire::Check-Valid-Until=false update >"$NEXT/swan-$SWAN_SUITE.log" 2>&1 ||
    { tail -20 "$NEXT/swan-$SWAN_SUITE.log" >&2; exit 1; }
  in_root env DEBIAN_FRONTEND=noninteractive nice -n 10 apt-get -q -y --no-install-recommends \
    -o Dpkg::Options::=--force-confold install -t "$SWAN_SUITE" "${swan_pkgs[@]}" >>"$NEXT/swan-$SWAN_SUITE.log" 2>&1 ||
    { tail -20 "$NEXT/swan-$SWAN_SUITE.log" >&2; exit 1; }
  [[ "$(swan_ver)" == "$SWAN_SERIES".* ]] ||
    { echo "kernel-next: strongswan-charon is $(swan_ver) after the $SWAN_SUITE install, want $SWAN_SERIES.*" >&2; exit 1; }
fi
phase "strongSwan $(swan_ver) from $SWAN_SUITE" "$t"

# 3c. Tools the VM tests run that a root made before they were in the list above lacks (python3:
#     TestNicmodelReplay's sender), from trixie.
t=$(now)
if [ ! -x "$ROOT/usr/bin/python3" ]; then
  in_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y --no-install-recommends install python3-minimal \
    >"$NEXT/tools.log" 2>&1 || { tail -20 "$NEXT/tools.log" >&2; exit 1; }
fi
phase "test tools in the root" "$t"

# 4. The kernel, modules and headers unpacked into the root; depmod there.
t=$(now)
if [ ! -f "$ROOT/lib/modules/$release/modules.dep" ] || [ ! -e "$ROOT/lib/modules/$release/build/Makefile" ]; then
  for p in "${pkgs[@]}"; do
    [ "$p" = "linux-source-$SERIES" ] && continue
    dpkg -x "$NEXT/debs/${p}"_*.deb "$ROOT"
  done
  chroot "$ROOT" depmod -a "$release"
fi
# Debian 13 ships the image as /usr/lib/modules/<release>/vmlinuz and links it into /boot from the
# postinst, which dpkg -x does not run: testlab looks in the root's /boot.
[ -f "$ROOT/boot/vmlinuz-$release" ] || cp "$ROOT/usr/lib/modules/$release/vmlinuz" "$ROOT/boot/vmlinuz-$release"
# netdevsim is built from this tarball (only drivers/net/netdevsim is extracted), as for 6.12.
[ -f "$ROOT/usr/src/linux-source-$SERIES.tar.xz" ] || dpkg -x "$NEXT/debs/linux-source-${SERIES}"_*.deb "$ROOT"
phase "kernel unpacked into the root" "$t"

# 5. Prove the toolchain: an empty out-of-tree module built against the headers in the root.
t=$(now)
probe=$ROOT/tmp/sluice-kbuild-probe
rm -rf "$probe" && mkdir -p "$probe"
printf '#include <linux/module.h>\nMODULE_LICENSE("GPL");\n' >"$probe/probe.c"
echo 'obj-m := probe.o' >"$probe/Makefile"
in_root make -s -C "/lib/modules/$release/build" M=/tmp/sluice-kbuild-probe modules >"$NEXT/kbuild-probe.log" 2>&1 ||
  { tail -20 "$NEXT/kbuild-probe.log" >&2; exit 1; }
rm -rf "$probe"
phase "probe module built with $(chroot "$ROOT" gcc-14 --version | head -1)" "$t"

ls "$ROOT/boot/vmlinuz-$release" >/dev/null
echo "$release" >"$NEXT/release"

# 6. The VM's out-of-tree modules for this kernel (netdevsim, the NIC model), built now, under the
#    lock, so that the first 7.3 VM run finds them cached (about 1.5-2.5 min on a fresh machine,
#    mostly extracting netdevsim from linux-source). Only for the root the VM boots (testlab's
#    NextRoot) and where Go is installed; NEXT_MODULES=0 skips it. A NIC model that does not build
#    for this kernel is not fatal here: scripts/vmtest.sh says so and runs the rest.
repo=$(cd "$(dirname "$0")/.." && pwd -P)
if [ "${NEXT_MODULES:-1}" = 1 ] && [ "$NEXT" = /var/cache/sluice/next ] && command -v go >/dev/null; then
  t=$(now)
  bin=$NEXT/sluice-modules
  ( cd "$repo" && go build -o "$bin" ./cmd/sluice )
  SLUICE_VM_KERNEL=next "$bin" vm netdevsim >/dev/null
  phase "netdevsim for $release" "$t"
  t=$(now)
  SLUICE_VM_KERNEL=next "$bin" vm nicmodel >/dev/null || log "the NIC model does not build for $release (above)"
  phase "NIC model for $release" "$t"
  rm -f "$bin"
fi
log "ready: kernel $ROOT/boot/vmlinuz-$release, strongSwan $(swan_ver)"
