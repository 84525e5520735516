#!/usr/bin/env bash
# Packs the Envoy rate limit service comparison (bench/cmd/compare -only
# envoy) into one archive that runs on a bare Linux box without a Go
# toolchain: the compare tool, sluice, envoyproxy/ratelimit, a
# redis-server with the shared libraries it links (ldd), and run.sh.
#   scripts/pack-bench.sh [out.tar.gz]        # from the repo root
# On the box:
#   tar xzf sluice-bench.tar.gz && sluice-bench/run.sh \
#     -cpus-redis 0 -cpus-service 1-7 -cpus-load 8-15 -envoy-callers 32,128,512
# Prebuilt binaries may be given instead of built: COMPARE_BIN, SLUICE_BIN,
# RATELIMIT_BIN, REDIS_SERVER (default: redis-server on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-sluice-bench.tar.gz}
case $out in /*) ;; *) out=$PWD/$out ;; esac
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
dir=$stage/sluice-bench
mkdir -p "$dir/lib"
if [ -n "${COMPARE_BIN:-}" ]; then cp "$COMPARE_BIN" "$dir/compare"; else (cd bench && CGO_ENABLED=0 go build -o "$dir/compare" ./cmd/compare); fi
if [ -n "${SLUICE_BIN:-}" ]; then cp "$SLUICE_BIN" "$dir/sluice"; else CGO_ENABLED=0 go build -o "$dir/sluice" ./cmd/sluice; fi
if [ -z "${RATELIMIT_BIN:-}" ]; then RATELIMIT_BIN=$(cd bench && go run ./cmd/compare -print-ratelimit-bin); fi
cp "$RATELIMIT_BIN" "$dir/ratelimit"
redis=${REDIS_SERVER:-$(command -v redis-server)}
cp "$redis" "$dir/redis-server"
# The libraries it links, but not the C library and the loader, which
# must be the box's own.
ldd "$redis" | awk '/=> \// {print $3}' | while read -r lib; do
  case $(basename "$lib") in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux*) ;;
    *) cp -L "$lib" "$dir/lib/" ;;
  esac
done
cat >"$dir/run.sh" <<'RUN'
#!/bin/sh
# Runs the Envoy rate limit service comparison with the packed binaries;
# arguments go to compare (e.g. -cpus-redis 0 -cpus-service 1-7 -cpus-load 8-15).
here=$(cd "$(dirname "$0")" && pwd)
export PATH="$here:$PATH" LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$here/redis-server" --version >/dev/null || { echo "run.sh: the packed redis-server does not run here" >&2; exit 1; }
exec "$here/compare" -only envoy -sluice-bin "$here/sluice" -ratelimit-bin "$here/ratelimit" "$@"
RUN
chmod +x "$dir/run.sh" "$dir/compare" "$dir/sluice" "$dir/ratelimit" "$dir/redis-server"
tar -C "$stage" -czf "$out" sluice-bench
echo "$out"
