#!/usr/bin/env bash
# Makes sure nginx and caddy are installed: the forward-auth tests start
# their own processes of both (internal/testkit/proxytest) on free loopback ports,
# with configurations of their own. Installs Debian's packages with apt-get
# when run as root; otherwise fails loudly, since those tests are never
# skipped.
set -euo pipefail
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }
missing=()
have nginx || missing+=(nginx)
have caddy || missing+=(caddy)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "${missing[*]} not found: installing with apt-get" >&2
  apt-get update -qq >&2
  # The packages' services are not wanted: the tests run their own.
  RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
  ok=1
  for p in "${missing[@]}"; do have "$p" || ok=0; done
  [ "$ok" = 1 ] && exit 0
fi
echo "error: ${missing[*]} not installed and cannot be installed here." >&2
echo "       Install them (Debian/Ubuntu: apt-get install nginx caddy; macOS: brew install nginx caddy) and run again." >&2
exit 1
