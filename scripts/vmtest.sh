#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the VM test suite: every package with test files tagged `vmtest`,
# inside one qemu VM booting the Debian 6.12 kernel (see internal/testlab).
#
#   bash scripts/vmtest.sh               # everything
#   bash scripts/vmtest.sh TestESP 'TestFlower/traffic'
#
# Each argument is a -test.run filter; with several, every test binary runs
# once per filter. A full run (no argument) runs each top-level test on its
# own, shared out between two VMs booted side by side (VMTEST_VMS). Test
# binaries are compiled here on the host, so the guest needs no Go
# toolchain; they and their logs live in
# .vmtest/ (same path inside the guest). Prints go test -v output live, then
# the failures and a last line "N passed, N failed[, N skipped]" counting
# tests and subtests. Exits non-zero if anything failed or the VM did.
#
# Environment: VMTEST_VMS (default 2 for a full run, 1 for a filtered one)
# how many VMs share the work, VMTEST_TIMEOUT (default 25m) limits each
# VM's run,
# VMTEST_TEST_TIMEOUT (default 22m) each test binary's run. In the
# guest, tests find the sluice binary built here in $SLUICE_BIN,
# netdevsim.ko in $SLUICE_NETDEVSIM, the NIC model (kmod/nicmodel) in
# $SLUICE_NICMODEL and an iproute2 that knows "offload packet" in
# $SLUICE_IP_PACKET.
set -euo pipefail

now_ms() { date +%s%3N; }
since() { awk -v a="$1" -v b="$(now_ms)" 'BEGIN { printf "%.1fs", (b - a) / 1000 }'; }
start=$(now_ms)
cd "$(dirname "$0")/.."
repo=$(pwd -P)
out=$repo/.vmtest
timeout=${VMTEST_TIMEOUT:-25m}

log() { printf 'vmtest: %s\n' "$*" >&2; }
# Single-quote for the guest's /bin/sh (dash: no $'...').
q() { local s=${1//\'/\'\\\'\'}; printf "'%s'" "$s"; }

rm -rf "$out"
mkdir -p "$out/results"
# Test binaries go outside the repository: the guest sees the repository over an uncached 9p
# share, which re-read a 30-70 MB binary's pages on every one of the ~290 test processes, but the
# host root over a cached one (internal/testlab), which reads them once per VM. A new directory
# per run, since a cached share may show a replaced file stale; this checkout's older runs go.
# With SLUICE_VM_KERNEL=next the guest's root is the trixie root (docs/testing.md "The next
# kernel"): the binaries go under it, and the guest names them without that prefix.
groot=
[ "${SLUICE_VM_KERNEL:-}" != next ] || groot=/var/cache/sluice/next/root
binroot=$groot${SLUICE_CACHE:-/var/cache/sluice}/vmtest-bin/$(printf '%s' "$repo" | md5sum | cut -c1-12)
rm -rf "$binroot"
bindir=$binroot/$(date +%s%N)
mkdir -p "$bindir"
ln -s "$bindir" "$out/bin"
guestbin=${bindir#"$groot"}

# Packages with at least one test file whose //go:build line names vmtest.
# -e: a broken package elsewhere in the tree must not hide these.
pkgdirs=()
# A package that also has host tests (untagged files) runs only the tests
# its vmtest files declare: the host run (make test-host) already ran the
# others, and repeating them under TCG cost minutes (internal/agent's mesh).
only=()
while read -r dir files; do
  tagged=() untagged=0
  for f in $files; do
    if grep -qE '^//go:build.*\bvmtest\b' "$dir/$f"; then
      tagged+=("$dir/$f")
    elif grep -qE '^func (Test|Fuzz|Example)' "$dir/$f"; then
      untagged=1
    fi
  done
  [ ${#tagged[@]} -gt 0 ] || continue
  pkgdirs+=("$dir")
  if [ $untagged = 1 ]; then
    only+=("^($(sed -nE 's/^func (Test[A-Za-z0-9_]*)\(.*/\1/p' "${tagged[@]}" | paste -sd'|'))\$")
  else
    only+=("")
  fi
done < <(go list -e -tags vmtest -f '{{.Dir}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' ./...)
if [ ${#pkgdirs[@]} -eq 0 ]; then
  log "no package has vmtest-tagged test files"
  exit 1
fi

names=()
for dir in "${pkgdirs[@]}"; do
  rel=${dir#"$repo"/}
  name=$(printf '%s' "$rel" | tr '/' '_').test
  log "building $rel"
  go test -c -tags vmtest -o "$out/bin/$name" "./$rel"
  names+=("$name")
done
go build -o "$out/sluice" ./cmd/sluice

t0=$(now_ms)
"$out/sluice" vm netdevsim >/dev/null
log "netdevsim.ko ready ($(since "$t0"))"
t0=$(now_ms)
if "$out/sluice" vm nicmodel >/dev/null; then
  log "nicmodel.ko ready ($(since "$t0"))"
elif [ "${SLUICE_VM_KERNEL:-}" = next ]; then
  # The second kernel (docs/testing.md "The next kernel") may be ahead of the model's C: run the
  # rest, and let the model's tests say they have no module.
  log "nicmodel.ko does not build for the next kernel (above); its tests cannot load it"
else
  exit 1
fi

filters=("$@")

# The work queue: one entry per test binary and -test.run pattern. A full
# run has one entry per top-level test, so that several VMs can share it;
# a filtered run has one entry per binary and filter. Entries run in
# their package directory, each VM taking the next unclaimed one (mkdir
# on the shared directory is the lock: atomic on the host's filesystem).
# A test in a VM mostly runs one command at a time, so one TCG VM keeps
# about one host CPU busy; two VMs use a 2-core machine (docs/testing.md).
# VMTEST_VMS sets how many: default 2 for a full run, 1 for a filtered one.
# Slow tests start first so that the VMs finish together: by the seconds
# each took in the last full run on this machine (kept in $times), else
# by the list below, measured on 2026-11-25 (the rest in name order).
times=${VMTEST_TIMES:-/var/cache/sluice/vmtest-seconds.tsv}
# A new machine has no last run: start from the seconds recorded in the repository (a full run on
# this machine type, scripts/vmtest-seconds.tsv), so that its slow tests still start first.
[ -s "$times" ] || times=$repo/scripts/vmtest-seconds.tsv
slow_first="TestOverlayIKE TestOverlayBondVXLANESP TestSwanTunnelsMirroredByGateway TestOverlayGuests
TestOverlayNetdevsimOffload TestOverlaySRIOV TestLabOverlayPair TestOverlayBondPortOffloadFailover"
queue=$out/queue.tsv
: >"$queue.unsorted"
for i in "${!pkgdirs[@]}"; do
  if [ ${#filters[@]} -gt 0 ]; then
    for f in "${filters[@]}"; do printf '%s\t%s\t%s\t%s\n' 0 "${names[$i]}" "${pkgdirs[$i]}" "$f"; done
    continue
  fi
  while read -r t; do
    [ -n "$t" ] || continue
    # Packages that also have host tests run only their vmtest tests.
    [ -z "${only[$i]}" ] || [[ $t =~ ${only[$i]} ]] || continue
    w=$(awk -v t="$t" '$1 == t { print int($2); exit }' "$times" 2>/dev/null || true)
    if [ -z "$w" ]; then
      w=0 n=1000
      for slow in $slow_first; do
        [ "$slow" != "$t" ] || w=$n
        n=$((n - 1))
      done
    fi
    printf '%s\t%s\t%s\t%s\n' "$w" "${names[$i]}" "${pkgdirs[$i]}" "^$t\$"
  done < <("$out/bin/${names[$i]}" -test.list '^Test')
done >>"$queue.unsorted"
# Index, binary, directory, pattern; the heaviest first, ties in order.
sort -s -t$'\t' -k1,1nr "$queue.unsorted" | awk -F'\t' -v OFS='\t' '{ print NR, $2, $3, $4 }' >"$queue"
rm "$queue.unsorted"
entries=$(wc -l <"$queue")
vms=${VMTEST_VMS:-2}
[ ${#filters[@]} -eq 0 ] || vms=${VMTEST_VMS:-1}
[ "$vms" -le "$entries" ] || vms=$entries
[ "$vms" -ge 1 ] || vms=1
log "$entries test runs in $vms VM(s)"

# The script each guest runs: claim the next entry, run it, output live on
# the console and in a log, exit code in a file. Its stdin is /dev/null so
# that nothing a test starts can read the queue.
guest=$out/guest.sh
{
  echo "# generated by scripts/vmtest.sh"
  # Tests that drive the sluice binary use this one (built above, on the
  # host), copied once into the guest's tmpfs: the share is uncached 9p, so
  # every exec from it re-read the 70 MB binary's pages over 9p under TCG
  # (1-4 s an exec; from tmpfs about 0.1 s, docs/testing.md).
  echo "mkdir -p /run/sluice-vmtest && cp $(q "$out/sluice") /run/sluice-vmtest/sluice || exit 1"
  echo "export SLUICE_BIN=/run/sluice-vmtest/sluice"
  # Scale runs (docs/benchmarks.md): SLUICE_FLOWER_SCALE=65536 bash scripts/vmtest.sh TestFlowerScale
  [ -z "${SLUICE_FLOWER_SCALE:-}" ] || echo "export SLUICE_FLOWER_SCALE=$(q "$SLUICE_FLOWER_SCALE")"
  # Rekeys under traffic (TestSwanPacketOffloadOnModel, TestOverlayIKE): SLUICE_REKEYS=100 for issue 32's run.
  [ -z "${SLUICE_REKEYS:-}" ] || echo "export SLUICE_REKEYS=$(q "$SLUICE_REKEYS")"
  # The NIC model's driver profile (kmod/nicmodel/README.md), default mlx5-6.12 (the module's
  # and internal/testutil's NicmodelProfile default too); labs that insert the model follow it:
  # SLUICE_NICMODEL_PROFILE=mlx5-upstream bash scripts/vmtest.sh TestNicmodel
  echo "export SLUICE_NICMODEL_PROFILE=$(q "${SLUICE_NICMODEL_PROFILE:-mlx5-6.12}")"
  # Override of the profile's TX SA miss (docs/testing.md): SLUICE_NICMODEL_TX_MISS_CLEARTEXT=0 (drop) or 1
  # The fleet mesh with ESP (~10 min under TCG) runs only when asked: SLUICE_FLEET_MESH_ESP=1.
  [ -z "${SLUICE_FLEET_MESH_ESP:-}" ] || echo "export SLUICE_FLEET_MESH_ESP=$(q "$SLUICE_FLEET_MESH_ESP")"
  [ -z "${SLUICE_NICMODEL_TX_MISS_CLEARTEXT:-}" ] || echo "export SLUICE_NICMODEL_TX_MISS_CLEARTEXT=$(q "$SLUICE_NICMODEL_TX_MISS_CLEARTEXT")"
  echo "rc=0 tab=\$(printf '\\t')"
  echo "while IFS=\$tab read -r idx name dir pat; do"
  echo "  mkdir $(q "$out/claims")/\$idx 2>/dev/null || continue"
  echo "  base=$(q "$out/results")/\$idx"
  echo "  echo \"=== vmtest: \$dir (-test.run \$pat)\""
  echo "  cd \"\$dir\" || { rc=1; continue; }"
  echo "  { $(q "$guestbin")/\$name -test.v -test.timeout=${VMTEST_TEST_TIMEOUT:-22m} -test.run \"\$pat\" </dev/null; echo \$? >\"\$base.rc\"; } 2>&1 | tee \"\$base.log\""
  echo "  [ \"\$(cat \"\$base.rc\")\" = 0 ] || rc=1"
  echo "done <$(q "$queue")"
  echo "exit \$rc"
} >"$guest"
mkdir -p "$out/claims"

set +e
if [ "$vms" = 1 ]; then
  "$out/sluice" vm run --verbose --timeout "$timeout" -- sh "$guest"
  vmrc=$?
else
  for k in $(seq 1 "$vms"); do
    # Lines of the VMs interleave; each says which VM it came from.
    { "$out/sluice" vm run --verbose --timeout "$timeout" -- sh "$guest"; echo $? >"$out/vm$k.rc"; } 2>&1 | sed -u "s/^/[vm$k] /" &
  done
  wait
  vmrc=0
  for k in $(seq 1 "$vms"); do
    [ "$(cat "$out/vm$k.rc" 2>/dev/null)" = 0 ] || vmrc=1
  done
fi
set -e

# Count from the logs, on the host: they survive a guest that died midway.
passed=0 failed=0 skipped=0
failures=()
while IFS=$'\t' read -r idx name dir pat; do
  base=$out/results/$idx
  rel=${dir#"$repo"/}
  [ -f "$base.log" ] || : >"$base.log"
  p=$(grep -cE '^ *--- PASS: ' "$base.log" || true)
  f=$(grep -cE '^ *--- FAIL: ' "$base.log" || true)
  s=$(grep -cE '^ *--- SKIP: ' "$base.log" || true)
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  while read -r line; do
    failures+=("$rel: $line")
  done < <(grep -E '^ *--- FAIL: ' "$base.log" | sed 's/^ *--- FAIL: //')
  rc=$(cat "$base.rc" 2>/dev/null || echo none)
  # A dead VM, a panic or a -test.timeout fails without a --- FAIL line.
  if [ "$rc" = none ]; then
    failed=$((failed + 1))
    failures+=("$rel ($pat): did not finish (VM failed or timed out)")
  elif [ "$rc" != 0 ] && [ "$f" = 0 ]; then
    failed=$((failed + 1))
    failures+=("$rel ($pat): test binary exited $rc (panic or timeout: see .vmtest/results/$idx.log)")
  fi
done <"$queue"

# What each top-level test took, for the next full run's order (never into the repository's seed).
seen=${VMTEST_TIMES:-/var/cache/sluice/vmtest-seconds.tsv}
if [ ${#filters[@]} -eq 0 ] && mkdir -p "$(dirname "$seen")" 2>/dev/null; then
  cat "$out"/results/*.log | sed -nE 's/^--- (PASS|FAIL): (Test[A-Za-z0-9_]*) \(([0-9.]+)s\)$/\2\t\3/p' >"$seen.new" &&
    mv "$seen.new" "$seen" || true
fi

echo
if [ ${#failures[@]} -gt 0 ]; then
  echo "FAILED:"
  printf '  %s\n' "${failures[@]}"
fi
if [ "$vmrc" != 0 ] && [ "$failed" = 0 ]; then
  log "the VM run failed (exit $vmrc) although no test failed"
  failed=1
fi
log "wall time $(since "$start")"
summary="$passed passed, $failed failed"
[ "$skipped" = 0 ] || summary="$summary, $skipped skipped"
echo "$summary"
[ "$failed" = 0 ]
