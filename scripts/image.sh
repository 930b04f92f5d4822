#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# make image: the DaemonSet's container image (deploy/daemonset.yaml), an OCI image layout in
# bin/image/oci and the same as one archive, bin/image/sluice-VERSION.oci.tar, written by
# tools/ociimage from the static binary (no container runtime or daemon needed). Push it with
# skopeo (Debian package skopeo):
#   skopeo copy oci:bin/image/oci:VERSION docker://REGISTRY/sluice:VERSION
# or load it: podman load -i bin/image/sluice-VERSION.oci.tar
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
out=bin/image
mkdir -p "$out"
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
CGO_ENABLED=0 $GO build -trimpath -buildvcs=false \
	-ldflags "-s -w -X sluice/internal/cli.version=$version -X sluice/internal/cli.commit=$commit" \
	-o "$out/sluice" ./cmd/sluice
$GO run ./tools/ociimage -binary "$out/sluice" -out "$out/oci" -ref "$version" -version "$version"
rm -f "$out"/sluice-*.oci.tar
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
	-C "$out/oci" -cf "$out/sluice-$version.oci.tar" .
echo "image: $out/oci (ref $version), $out/sluice-$version.oci.tar ($(du -h "$out/sluice-$version.oci.tar" | cut -f1))"
