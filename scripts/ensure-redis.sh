#!/usr/bin/env bash
# Makes sure redis-server is on the PATH: the tests start their own servers
# (standalone, Cluster, TLS, Sentinel) on free loopback ports and never use
# a shared instance. Installs it with apt-get when run as root; otherwise
# fails loudly, since Redis tests are never skipped.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "redis-server not found: installing it with apt-get" >&2
  apt-get update -qq >&2
  apt-get install -y -qq redis-server >&2
  command -v redis-server >/dev/null 2>&1 && exit 0
fi
echo "error: redis-server is not on the PATH and cannot be installed here." >&2
echo "       Install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) and run again." >&2
exit 1
