#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the real kube-apiserver from its Go modules (no Kubernetes checkout, no container image) and
# installs etcd, for the fleet tests (internal/agent, internal/fleettest). The binary is cached outside
# the repository and the step is skipped when it is present: a fresh 2-core machine pays ~5 min once.
#
# Why a throwaway module: k8s.io/kubernetes is not meant to be required by other modules. Its go.mod
# replaces its 33 staging modules (k8s.io/api, apimachinery, ...) with ./staging/... directories that
# are not in the module zip, so a requiring module must replace each of them with the published
# v0.X.Y of the same release. The list is read from the release's own go.mod, not hard-coded.
set -euo pipefail

log() { printf 'kube-apiserver: %s\n' "$*"; }

VER=${SLUICE_KUBE_VERSION:-1.37.2}
STAGING_VER=v0.${VER#1.}
CACHE=${SLUICE_CACHE:-/var/cache/sluice}
OUT=$CACHE/kube-apiserver-v$VER

# make setup installs etcd-server with its other packages and runs this script beside apt-get
# (SLUICE_KUBE_NO_APT=1), which must then not take the dpkg lock.
if ! command -v etcd >/dev/null && [ -z "${SLUICE_KUBE_NO_APT:-}" ]; then
  [ "$(id -u)" = 0 ] || { echo "kube-apiserver: installing etcd-server needs root" >&2; exit 1; }
  log "installing etcd-server"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends etcd-server
  # Tests start their own etcd on a free port: the packaged one must not hold 2379.
  if command -v systemctl >/dev/null; then systemctl disable --now etcd >/dev/null 2>&1 || true; fi
fi

# One build at a time, and the fleet tests wait on this lock for a build that make setup started
# in the background (internal/fleet/kubetest): held from here until the script exits.
mkdir -p "$CACHE"
exec 9>"$CACHE/kube-apiserver.lock"
flock -x 9

if [ -x "$OUT" ]; then
  log "present: $OUT"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
start=$(date +%s)
go mod init sluice.local/kube-apiserver-build >/dev/null 2>&1
modfile=$(go mod download -json "k8s.io/kubernetes@v$VER" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
[ -f "$modfile" ] || { echo "kube-apiserver: cannot download k8s.io/kubernetes v$VER's go.mod" >&2; exit 1; }
staging=$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$modfile" | sort -u)
n=$(printf '%s\n' "$staging" | grep -c .)
log "k8s.io/kubernetes v$VER: replacing $n staging modules with $STAGING_VER"
{
  echo "require k8s.io/kubernetes v$VER"
  for m in $staging; do echo "replace $m => $m $STAGING_VER"; done
} >>go.mod
go get "k8s.io/kubernetes/cmd/kube-apiserver@v$VER" >/dev/null
minor=${VER#1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$VER"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
log "building cmd/kube-apiserver (several minutes on 2 cores)"
# No -trimpath: it changes the key of every package in Go's build cache, and then the tests' own
# client-go, apimachinery and their dependencies (the same versions) could not reuse what this
# build compiled, beside it, on a fresh machine.
go build -ldflags "$ldflags" -o "$OUT.tmp" k8s.io/kubernetes/cmd/kube-apiserver
mv "$OUT.tmp" "$OUT"
log "built $OUT in $(( $(date +%s) - start )) s"
