#!/usr/bin/env bash
# Makes sure the tools deploy/'s tests run are here: buildah (builds the
# Dockerfile), a static busybox (the shell of the test's local builder
# image), systemd-analyze (checks the systemd unit) and helm (lints and
# renders the chart). The Debian packages come from apt-get when run as root;
# helm is a Go program, installed with go install into $(go env GOPATH)/bin.
# A minute or two on a fresh machine, nothing when present; otherwise fails loudly.
set -euo pipefail
HELM_VERSION=v3.22.0
export PATH="$(go env GOPATH)/bin:$PATH"
missing=()
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
# Debian's busybox package is dynamically linked; busybox-static is not.
if ! command -v busybox >/dev/null 2>&1 || ! command -v file >/dev/null 2>&1; then
  missing+=(busybox-static file)
elif file -L "$(command -v busybox)" | grep -q dynamically; then
  missing+=(busybox-static)
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]} with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq "${missing[@]}" >&2 || { apt-get update -qq >&2 && apt-get install -y -qq "${missing[@]}" >&2; }
  else
    echo "error: ${missing[*]} needed by deploy/'s tests; install them (Debian/Ubuntu: apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi
if ! command -v helm >/dev/null 2>&1; then
  echo "installing helm $HELM_VERSION with go install (a few minutes the first time)" >&2
  (cd /tmp && go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
fi
command -v helm >/dev/null
