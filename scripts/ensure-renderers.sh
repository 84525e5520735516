#!/usr/bin/env bash
# Makes sure headless Chromium and rsvg-convert are on the PATH: the tests
# of sluice advise's HTML report render it in Chromium and its charts with
# librsvg, and are never skipped. Installs them with apt-get when run as
# root (Debian's chromium and librsvg2-bin; a minute or two on a fresh
# machine, nothing when present); otherwise fails loudly.
set -euo pipefail
have() { command -v chromium >/dev/null 2>&1 && command -v rsvg-convert >/dev/null 2>&1; }
if have; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "chromium or rsvg-convert not found: installing them with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq chromium librsvg2-bin >&2 || { apt-get update -qq >&2 && apt-get install -y -qq chromium librsvg2-bin >&2; }
  have && exit 0
fi
echo "error: chromium and rsvg-convert are needed by the HTML report tests and cannot be installed here." >&2
echo "       Install them (Debian/Ubuntu: apt-get install chromium librsvg2-bin) and run again." >&2
exit 1
