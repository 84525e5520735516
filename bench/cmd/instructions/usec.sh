#!/usr/bin/env bash
# Redis server time per check (INFO commandstats, usec of EVALSHA and EVAL
# ÷ checks) of sluice's scripts, the classic one and two floors: a script
# that does nothing, and one that only does the GET and the SET … PX that
# any token bucket's read-modify-write with an expiry needs. Elapsed time
# inside Redis, so it moves with the machine's load: each limiter is run
# ROUNDS times (default 3), alternating, and every round is printed.
#   bench/cmd/instructions/usec.sh            # from the repo root
#   KEYS=100000 N=64000 bench/cmd/instructions/usec.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
port=${PORT:-6398}
keys=${KEYS:-100000}
n=${N:-64000}
rounds=${ROUNDS:-3}
out=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$out" >"$out/redis.log" 2>&1 &
rpid=$!
trap 'kill $rpid 2>/dev/null; rm -rf "$out"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
go build -o "$out/instructions" ./cmd/instructions
limiters=(empty-script get-set classic sluice sluice-client-clock sluice-coalesced)
printf '%-22s' limiter
for r in $(seq "$rounds"); do printf ' %14s' "round $r µs/check"; done
printf ' %12s\n' checks/call
declare -A results calls
for r in $(seq "$rounds"); do
  for l in "${limiters[@]}"; do
    redis-cli -p "$port" flushall >/dev/null
    got=$("$out/instructions" -addr "127.0.0.1:$port" -limiter "$l" -keys "$keys" -n "$n" \
      -zero "redis-cli -p $port config resetstat >/dev/null" \
      -dump "redis-cli -p $port info commandstats >$out/stats")
    read -r usec c < <(tr -d '\r' <"$out/stats" | awk -F'[:,=]' '/^cmdstat_eval/ {u += $5; c += $3} END {print u, c}')
    results[$l]+=$(awk -v u="$usec" -v n="$got" 'BEGIN {printf " %14.2f", u / n}')
    calls[$l]=$(awk -v c="$c" -v n="$got" 'BEGIN {printf "%.1f", n / c}')
  done
done
for l in "${limiters[@]}"; do
  printf '%-22s%s %12s\n' "$l" "${results[$l]}" "${calls[$l]}"
done
