#!/usr/bin/env bash
# Makes sure promtool is on the PATH: a test runs `promtool test rules` on
# the alert rules in deploy/prometheus, and is never skipped. Installs
# Debian's prometheus package (which ships promtool) with apt-get when run
# as root; otherwise fails loudly.
set -euo pipefail
if command -v promtool >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "promtool not found: installing Debian's prometheus package with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq prometheus >&2 || { apt-get update -qq >&2 && apt-get install -y -qq prometheus >&2; }
  command -v promtool >/dev/null 2>&1 && exit 0
fi
echo "error: promtool is needed by the tests of deploy/prometheus and cannot be installed here." >&2
echo "       Install it (Debian/Ubuntu: apt-get install prometheus; or go install github.com/prometheus/prometheus/cmd/promtool@latest) and run again." >&2
exit 1
