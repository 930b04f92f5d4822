#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Run by TestDebInstallsIntoAFreshRoot inside its own mount namespace (unshare -m): installs the
# .deb into an overlay over a cached debootstrap root, so every test starts from a fresh root and
# the overlay's upper directory is exactly what dpkg changed.
#   install.sh LOWER DEB WORKDIR
set -euo pipefail
lower=$1 deb=$2 w=$3
r=$w/root
mkdir -p "$w/upper" "$w/work" "$r"
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$w/upper,workdir=$w/work" "$r"
mount -t proc proc "$r/proc"
mount -t sysfs sysfs "$r/sys"
mount -t tmpfs tmpfs "$r/run" # as on a booted system: systemd-analyze writes there
cp "$deb" "$r/tmp/sluice.deb"

fail() { echo "FAIL: $*"; exit 1; }
# Paths of the root, without the kernel's file systems and dpkg's own bookkeeping.
snapshot() {
	(cd "$r" && find . -xdev \( -path ./proc -o -path ./sys -o -path ./dev -o -path ./run -o -path ./tmp \
		-o -path ./var/lib/dpkg -o -path ./var/log -o -path ./var/cache/debconf \) -prune -o -print | sed 's#^\.##' | sort)
}
# Files the overlay copied up or created (not directories: their mtimes change with any child).
changed() {
	(cd "$w/upper" && find . -not -type d | sed 's#^\.##' | grep -Ev '^/(tmp|var/lib/dpkg|var/log|var/cache/debconf)/' | sort) || true
}

snapshot >"$w/before"
chroot "$r" dpkg -i /tmp/sluice.deb >"$w/dpkg-install.log" 2>&1 || { cat "$w/dpkg-install.log"; fail "dpkg -i"; }
# On a merged-/usr root /lib is a link to usr/lib: name the files where they are.
merged() { if [ -L "$r/lib" ]; then sed -E 's#^/(lib|bin|sbin)/#/usr/\1/#'; else cat; fi; }
chroot "$r" dpkg-query -L sluice | merged | sort -u >"$w/owned"
changed >"$w/changed-installed"
surprise=$(comm -23 "$w/changed-installed" "$w/owned")
[ -z "$surprise" ] || fail "installing changed files the package does not own (a maintainer script at work?): $surprise"
enabled=$(cd "$r/etc/systemd/system" 2>/dev/null && find . -name 'sluice*' | head -5)
[ -z "$enabled" ] || fail "installing enabled a unit: $enabled"
echo "installed: $(grep -c . "$w/owned") paths"

chroot "$r" /usr/sbin/sluice version >"$w/version.out" 2>&1 || { cat "$w/version.out"; fail "sluice version"; }
head -n 1 "$w/version.out"
# The BPF objects are inside the binary (bpf2go's go:embed): run the fast path's program over one
# packet (BPF_PROG_RUN), with a static policy on lo and nothing else from the repository.
cat >"$r/tmp/lab.yaml" <<'YAML'
lab: true
policy-source: static
interfaces:
  - {name: lo, l2: fib, xdp-mode: generic}
policies:
  - {dir: out, src: 10.1.0.0/16, dst: 10.2.0.0/16, priority: 100, peer: 192.0.2.2, local: 192.0.2.1,
     reqid: 1, offload: packet, offload-dev: lo}
YAML
chroot "$r" /usr/sbin/sluice gateway explain -f /tmp/lab.yaml --iface lo src 10.1.0.1 dst 10.2.0.9 proto udp dport 53 >"$w/explain.out" 2>&1 ||
	{ cat "$w/explain.out"; fail "sluice gateway explain (the embedded XDP program)"; }
grep -q 'src 10.1.0.0/16 dst 10.2.0.0/16' "$w/explain.out" || { cat "$w/explain.out"; fail "explain did not find the policy"; }
echo "embedded XDP program ran: $(head -n 1 "$w/explain.out")"
units=$(grep -E '^(/usr)?/lib/systemd/system/[^/]+\.service$' "$w/owned" || true)
[ -n "$units" ] || fail "the package ships no systemd unit"
for u in $units; do
	chroot "$r" systemd-analyze verify "$u" >"$w/verify.out" 2>&1 || { cat "$w/verify.out"; fail "systemd-analyze verify $u"; }
	# verify exits 0 on some problems it only prints (an unknown key, a missing binary)
	if grep -v 'Failed to connect to bus\|System has not been booted' "$w/verify.out" | grep -q .; then
		cat "$w/verify.out"
		fail "systemd-analyze verify $u printed warnings"
	fi
	echo "unit ok: $u"
done

chroot "$r" dpkg --purge sluice >"$w/dpkg-purge.log" 2>&1 || { cat "$w/dpkg-purge.log"; fail "dpkg --purge"; }
snapshot >"$w/after"
diff -u "$w/before" "$w/after" >"$w/left.diff" || { cat "$w/left.diff"; fail "the root differs after purge"; }
left=$(changed)
[ -z "$left" ] || fail "files changed or left after purge: $left"
echo "purged: nothing left"
