#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# make package: a static binary (no cgo, version and commit stamped, the BPF objects embedded by
# bpf2go's go:embed), then the .deb and .rpm around it, built by nfpm (contrib/nfpm.yaml) from a
# staging directory. Output in bin/package/:
#   sluice-VERSION-linux-amd64    the static binary ("any Linux", docs/install.md)
#   sluice_VERSION-1_amd64.deb, sluice-VERSION-1.x86_64.rpm
# The man pages and completions come from the command tree (tools/gendocs), the units from every
# contrib/systemd/*.service, the examples from contrib/examples.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf 'package: %s\n' "$*"; }

GO=${GO:-go}
out=bin/package
stage=$out/stage
rm -rf "$stage" "$out"/*.deb "$out"/*.rpm "$out"/sluice-*-linux-*
mkdir -p "$stage"/{units,doc,examples,licenses}

commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
desc=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
# A package version must start with a digit and sort upwards: a tag v1.2.3 gives 1.2.3, an
# untagged commit 0.0.0+git<commit time>.<short hash> (newer commits sort higher).
if [[ $desc =~ ^v([0-9][0-9.]*)$ ]]; then
	version=${BASH_REMATCH[1]}
else
	when=$(TZ=UTC git log -1 --date=format-local:%Y%m%d%H%M%S --format=%cd 2>/dev/null || echo 0)
	version="0.0.0+git$when.$(git rev-parse --short=12 HEAD 2>/dev/null || echo 0)"
	[[ $desc == *-dirty ]] && version+=.dirty
fi
# reproducible-builds.org: dates in the pages and the archives are the commit's, not the build's.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}

arch=$($GO env GOARCH)
log "static binary $version ($commit)"
CGO_ENABLED=0 $GO build -trimpath -buildvcs=false \
	-ldflags "-s -w -X sluice/internal/cli.version=$version -X sluice/internal/cli.commit=$commit" \
	-o "$stage/sluice" ./cmd/sluice
cp "$stage/sluice" "$out/sluice-$version-linux-$arch"

log "man pages and completions from the command tree"
$GO run ./tools/gendocs -out "$stage/docs" -version "$version"
gzip -9n "$stage"/docs/man/man8/*.8

for u in contrib/systemd/*.service; do
	# the unit in the repository names /usr/local/sbin (a hand install); the package's binary is /usr/sbin
	sed 's#/usr/local/sbin/sluice#/usr/sbin/sluice#g' "$u" >"$stage/units/$(basename "$u")"
done
cp contrib/examples/* "$stage/examples/"
printf 'sluice: statically-linked-binary [usr/sbin/sluice]\n' >"$stage/lintian-overrides"
cp LICENSE LICENSES/* "$stage/licenses/"
cp contrib/copyright "$stage/doc/copyright"
printf 'sluice (%s-1) unstable; urgency=medium\n\n  * Built from commit %s.\n\n -- sluice developers <dev@sluice.dev>  %s\n' \
	"$version" "$commit" "$(date -u -d "@$SOURCE_DATE_EPOCH" -R)" | gzip -9n >"$stage/doc/changelog.Debian.gz"

# nfpm lives in its own module (tools/nfpm) so that its dependencies stay out of sluice's go.mod.
$GO build -C tools/nfpm -o "$PWD/bin/nfpm" github.com/goreleaser/nfpm/v2/cmd/nfpm
export PKG_VERSION=$version PKG_ARCH=$arch
for p in deb rpm; do
	(cd "$stage" && ../../nfpm package --config ../../../contrib/nfpm.yaml --packager $p --target .. )
done
ls -1 "$out"/*.deb "$out"/*.rpm "$out/sluice-$version-linux-$arch" | sed 's/^/package: /'
