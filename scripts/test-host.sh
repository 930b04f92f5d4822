#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The host tests (make test-host), in three groups, each timed:
#   1. every package but the two below, while the kube-apiserver build that make setup started in the
#      background may still be running;
#   2. the packages whose tests start a real kube-apiserver (those importing internal/fleet/kubetest):
#      last, so that the build overlaps group 1 (their tests wait on its lock if it still runs);
#   3. the lab tests (test/e2e) alone: they pace real traffic, and another package's tests on the
#      second CPU delay the generator, whose catch-up bursts then overflow the 5 ms token bucket the
#      NDR test measures against.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

t0=$(date +%s)
phase() { printf 'test-host: [%4ds] %s\n' "$(( $(date +%s) - t0 ))" "$*"; }

all=$($GO list ./...)
kube=$($GO list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... |
  awk '/ sluice\/internal\/fleet\/kubetest( |$)/ { print $1 }')
e2e=$(printf '%s\n' "$all" | grep '/test/e2e$' || true)
rest=$(printf '%s\n' "$all" | grep -vxF -f <(printf '%s\n' $kube $e2e))

rc=0
phase "packages without the API server"
$GO test -count=1 -timeout 10m $rest || rc=1
phase "packages with a real kube-apiserver: $(echo $kube)"
$GO test -count=1 -timeout 10m $kube || rc=1
phase "lab tests, alone"
$GO test -count=1 -timeout 10m $e2e || rc=1
phase "done"
exit $rc
