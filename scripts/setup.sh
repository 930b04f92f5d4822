#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs everything sluice's build, tests and lab need on Debian 12 (bookworm).
# Idempotent: each step checks first and does nothing when already done.
set -euo pipefail

t0=$(date +%s)
# Each line says the seconds since setup started: docs/testing.md's per-phase times come from these.
log() { printf 'setup: [%4ds] %s\n' "$(( $(date +%s) - t0 ))" "$*"; }

[ "$(id -u)" = 0 ] || { echo "setup: run as root (apt-get, kernel install)" >&2; exit 1; }

# Packages for build (clang/bpf2go), host tests (iproute2, strongSwan), the lab and the test VM.
PKGS=(
  clang llvm libbpf-dev bpftool make gcc libc6-dev
  iproute2 ethtool iperf3 tcpdump kmod xz-utils cpio pciutils iputils-ping
  strongswan strongswan-swanctl charon-systemd libcharon-extra-plugins
  libstrongswan-standard-plugins libstrongswan-extra-plugins strongswan-pki
  qemu-system-x86 busybox-static chromium
  openvswitch-switch libvirt-clients libvirt-daemon libvirt-daemon-driver-qemu libxml2-utils
  lintian rpm debootstrap etcd-server
  prometheus  # its promtool checks deploy/monitoring's alert rules (TestPrometheusRules)
)
# Test kernel for the VM: bookworm-backports 6.12 (closer to what users run than bookworm's 6.1).
BPO_PKGS=(linux-image-amd64 linux-headers-amd64 linux-source)

# The fleet tests' real kube-apiserver, built once from its Go modules and cached outside the repo
# (scripts/kube-apiserver.sh): minutes of CPU and module downloads that need nothing apt installs.
# It starts first and setup does not wait for it: it runs beside apt-get, the debootstrap below,
# lint and the host tests, and the tests that need it wait on its lock (internal/fleet/kubetest).
# Its output goes to /var/cache/sluice/kube-apiserver.log.
mkdir -p /var/cache/sluice
if command -v go >/dev/null; then
  log "kube-apiserver build in the background (log: /var/cache/sluice/kube-apiserver.log)"
  # Appended, not truncated: a second setup's build waits on the first's lock meanwhile.
  echo "--- $(date -u +%FT%TZ) make setup" >>/var/cache/sluice/kube-apiserver.log
  SLUICE_KUBE_NO_APT=1 setsid bash "$(dirname "$0")/kube-apiserver.sh" </dev/null \
    >>/var/cache/sluice/kube-apiserver.log 2>&1 &
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

bpo=/etc/apt/sources.list.d/bookworm-backports.sources
need_kernel=0
ls /boot/vmlinuz-6.12* >/dev/null 2>&1 && ls /usr/src/linux-source-6.12*.tar.xz >/dev/null 2>&1 || need_kernel=1

if [ ${#missing[@]} -eq 0 ] && [ $need_kernel = 0 ]; then
  log "all packages and the test kernel are installed"
else
  if [ ! -f "$bpo" ]; then
    # Reuse the mirror the machine already uses: it is the only one reachable.
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$uri" ] || uri=http://deb.debian.org/debian
    log "adding bookworm-backports from $uri"
    cat >"$bpo" <<SRC
Types: deb
URIs: $uri
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing: ${missing[*]}"
    apt-get install -y -q --no-install-recommends "${missing[@]}"
    # The prometheus package starts its server; the tests need only its promtool.
    if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null; then
      systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
  fi
  if [ $need_kernel = 1 ]; then
    log "installing the test kernel from bookworm-backports"
    apt-get install -y -q --no-install-recommends -t bookworm-backports "${BPO_PKGS[@]}"
  fi
fi

# The next test kernel (Linux 7.3) over its Debian trixie root (scripts/kernel-next.sh, docs/testing.md
# "The next kernel"): 4-10 minutes of downloads, debootstrap and module builds that need only
# debootstrap (installed above). It runs in the background beside the rest of setup, lint and the host
# tests; make test's vmtest-next-subset runs the script again, which waits on its lock and then finds
# the root built. Its output goes to /var/cache/sluice/kernel-next.log.
log "the next kernel's trixie root in the background (log: /var/cache/sluice/kernel-next.log)"
echo "--- $(date -u +%FT%TZ) make setup" >>/var/cache/sluice/kernel-next.log
setsid bash "$(dirname "$0")/kernel-next.sh" </dev/null >>/var/cache/sluice/kernel-next.log 2>&1 &

# iproute2 that knows "offload packet" (6.2+), for the NIC model's tests in the
# VM. Unpacked beside the system's, not installed: the host's ip stays 6.1,
# whose output other tests parse. Tests find it through $SLUICE_IP_PACKET
# (scripts/vmtest.sh exports it).
ipbpo=/usr/local/lib/sluice/iproute2-bpo
if [ ! -x "$ipbpo/bin/ip" ]; then
  [ -f "$bpo" ] || { log "bookworm-backports missing: cannot fetch iproute2 for offload packet"; exit 1; }
  tmp=$(mktemp -d)
  ( cd "$tmp" && apt-get download -q -t bookworm-backports iproute2 >/dev/null 2>&1 ) ||
    { apt-get update -q && ( cd "$tmp" && apt-get download -q -t bookworm-backports iproute2 ); }
  mkdir -p "$ipbpo"
  dpkg -x "$tmp"/iproute2_*.deb "$tmp/x"
  cp "$tmp/x/bin/ip" "$ipbpo/ip.new" && mkdir -p "$ipbpo/bin" && mv "$ipbpo/ip.new" "$ipbpo/bin/ip"
  rm -rf "$tmp"
  log "$("$ipbpo/bin/ip" -V | awk '{print $3}' | tr -d ,) in $ipbpo/bin/ip (offload packet)"
fi

# charon must not run on the host by itself: tests start their own instances.
if command -v systemctl >/dev/null && systemctl is-enabled strongswan >/dev/null 2>&1; then
  systemctl disable --now strongswan >/dev/null 2>&1 || true
fi

# Tests start their own etcd on a free port: the packaged one must not hold 2379.
if command -v systemctl >/dev/null && systemctl is-enabled etcd >/dev/null 2>&1; then
  systemctl disable --now etcd >/dev/null 2>&1 || true
fi

# A fresh Debian root for the package test (test/install): minbase plus systemd, so that the
# root's own systemd-analyze verifies the units. The test mounts an overlay on it and never
# changes it. About 90 s and 230 MB, once.
pkgroot=/var/cache/sluice/pkgroot/bookworm
if [ ! -x "$pkgroot/usr/bin/systemd-analyze" ]; then
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=http://deb.debian.org/debian
  log "debootstrap of a fresh bookworm root for the package test into $pkgroot"
  rm -rf "$pkgroot.new"
  mkdir -p "$(dirname "$pkgroot")"
  debootstrap --variant=minbase --include=systemd bookworm "$pkgroot.new" "$uri" >/dev/null
  rm -rf "$pkgroot"
  mv "$pkgroot.new" "$pkgroot"
fi

mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf || true

log "done (the kube-apiserver build and the next kernel's root may still be running)"
