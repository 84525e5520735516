#!/usr/bin/env bash
# Builds sluice's release binaries: linux and darwin, amd64 and arm64,
# static (no cgo), the version and revision stamped in (`sluice version`),
# with a SHA256SUMS file beside them.
#
#   scripts/release.sh                 # or: make release
#   VERSION=v1.2.0 scripts/release.sh  # default: git describe --tags --always --dirty
#   cd dist && sha256sum -c SHA256SUMS
#
# Output: dist/sluice-VERSION-OS-ARCH.tar.gz (the binary, LICENSE, README.md)
# and dist/SHA256SUMS. TARGETS="linux/amd64 ..." and DIST=dir override.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}
REVISION=${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
TARGETS=${TARGETS:-"linux/amd64 linux/arm64 darwin/amd64 darwin/arm64"}
DIST=${DIST:-dist}
case "$VERSION" in
  *[!A-Za-z0-9._+-]*) echo "release.sh: VERSION $VERSION: only letters, digits and ._+- are allowed" >&2; exit 2 ;;
esac
mkdir -p "$DIST"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
files=()
for target in $TARGETS; do
  os=${target%/*} arch=${target#*/}
  name=sluice-$VERSION-$os-$arch
  echo "== $name"
  mkdir -p "$work/$name"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=false -tags timetzdata \
    -ldflags "-s -w -X main.stampedVersion=$VERSION -X main.stampedRevision=$REVISION" \
    -o "$work/$name/sluice" ./cmd/sluice
  cp LICENSE README.md "$work/$name/"
  # Reproducible archives: fixed owner, order and times.
  tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime='1970-01-01 00:00:00Z' \
    -cf - "$name" | gzip -n > "$DIST/$name.tar.gz"
  files+=("$name.tar.gz")
done
(cd "$DIST" && sha256sum "${files[@]}" > SHA256SUMS)
echo "== $DIST/SHA256SUMS"
cat "$DIST/SHA256SUMS"
