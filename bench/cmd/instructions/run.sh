#!/usr/bin/env bash
# Redis instructions per check, by callgrind, for sluice's scripts and the
# classic one. Needs valgrind (apt-get install valgrind) and redis-server.
#   bench/cmd/instructions/run.sh            # from the repo root
#   KEYS=1 LIMITERS="classic sluice-coalesced" bench/cmd/instructions/run.sh   # one hot key, two limiters
set -euo pipefail
cd "$(dirname "$0")/../.."
port=${PORT:-6399}
out=$(mktemp -d)
valgrind --tool=callgrind --callgrind-out-file="$out/cg.%p" redis-server --port "$port" --save "" --appendonly no >"$out/valgrind.log" 2>&1 &
vpid=$!
trap 'kill $vpid 2>/dev/null; rm -rf "$out"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
go build -o "$out/instructions" ./cmd/instructions
total() { # instructions in the newest dump
  sleep 1
  grep -hE '^(summary|totals):' "$(ls -t "$out"/cg.* | head -1)" | head -1 | awk '{print $2}'
}
printf '%-22s %12s\n' limiter instructions/check
for limiter in ${LIMITERS:-empty-script get-set classic sluice sluice-client-clock sluice-2-rules sluice-coalesced}; do
  n=$("$out/instructions" -addr 127.0.0.1:$port -limiter $limiter -n 6400 -keys "${KEYS:-10000}" \
    -zero "callgrind_control -z $vpid >/dev/null" -dump "callgrind_control -d $vpid >/dev/null")
  printf '%-22s %12d\n' "$limiter" $(( $(total) / n ))
done
