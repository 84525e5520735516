#!/usr/bin/env bash
# The whole test suite: what CI runs (.ci/run) and what the README tells a
# newcomer to run. Formatting, vet, staticcheck, then every test with -race.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/ensure-redis.sh
./scripts/ensure-renderers.sh
./scripts/ensure-proxies.sh
./scripts/ensure-promtool.sh

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2; echo "$unformatted" >&2; exit 1
fi
echo "== go vet"
go vet ./...
echo "== staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
echo "== go test -race ($(go list ./... | wc -l) packages; a line as each ends, and every 30 s what is still running)"
progress=$(mktemp -d)/testprogress
trap 'rm -rf "$(dirname "$progress")"' EXIT
go build -o "$progress" ./scripts/testprogress
go test -json -race -count=1 -timeout 30m ./... 2>&1 | "$progress" -every 30s
echo "== allocation guards without -race (the race detector allocates on the paths they hold to none)"
go test -count=1 -run 'AllocatesNothing' ./resilient/
echo "== bench module: vet, staticcheck, its tests and one pass of every benchmark (no timing is checked)"
(
  cd bench
  go vet ./...
  go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
  go test -count=1 -run . -bench . -benchtime 1x ./...
)
echo "== deploy module: the image (buildah), the Helm chart and manifests, the systemd unit, compose.yaml, the release script"
./scripts/ensure-deploy-tools.sh
(
  export PATH="$(go env GOPATH)/bin:$PATH"
  cd deploy
  go vet ./...
  go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
  go test -count=1 -timeout 20m ./...
)
echo "== release: cross-compile linux and darwin, amd64 and arm64 (scripts/release.sh into a temporary folder)"
dist=$(mktemp -d)
DIST="$dist" ./scripts/release.sh >/dev/null
(cd "$dist" && sha256sum -c --quiet SHA256SUMS)
rm -rf "$dist"
