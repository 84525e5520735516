#!/usr/bin/env bash
# What each thing a token-bucket script does costs inside Redis: every
# primitive is run 200,000 times in one EVAL on a redis-server of its own,
# and the best of 3 runs is printed as ns per iteration (the loop's own cost
# is the first row). Elapsed time, so run it on a quiet machine.
#   bench/cmd/luacost/run.sh            # from the repo root
set -euo pipefail
port=${PORT:-6396}
redis-server --port "$port" --save "" --appendonly no --daemonize yes >/dev/null
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p "$port" set k "$(printf '%016d' 0)" >/dev/null
n=200000
run() { # label, Lua statement using i (the loop counter), p (a 16-byte value) and ttl (a string)
  local best=
  for _ in 1 2 3; do
    local t0 t1
    t0=$(date +%s%N)
    redis-cli -p "$port" eval "local p = struct.pack('<dd', 1, 2) local ttl = '60000' for i = 1, $n do $2 end return 1" 0 >/dev/null
    t1=$(date +%s%N)
    local ns=$(( (t1 - t0) / n ))
    if [ -z "$best" ] || [ "$ns" -lt "$best" ]; then best=$ns; fi
  done
  printf '%-44s %6d\n' "$1" "$best"
}
printf '%-44s %6s\n' primitive ns/iter
run "empty loop" "local x = i"
run "arithmetic of one check (ceil, floor, min)" "local x = math.ceil(i / 3.3 * 1e6) + math.floor(i + 1e-9) + math.min(i, 5)"
run "struct.unpack of 2 doubles" "local a, b = struct.unpack('<dd', p)"
run "struct.pack of 2 doubles" "local x = struct.pack('<dd', i, i)"
run "redis.call TIME" "local t = redis.call('TIME')"
run "redis.call GET" "local x = redis.call('GET', 'k')"
run "redis.call SET" "redis.call('SET', 'k', p)"
run "redis.call SET PX, TTL a string" "redis.call('SET', 'k', p, 'PX', ttl)"
run "redis.call SET PX, TTL a computed number" "redis.call('SET', 'k', p, 'PX', 60000 + i)"
run "redis.call HMGET of 2 fields" "local x = redis.call('HMGET', 'h', 'tokens', 'ts')"
run "redis.call HMSET of 2 fields (numbers)" "redis.call('HMSET', 'h', 'tokens', i, 'ts', i)"
run "redis.call EXPIRE (a number)" "redis.call('EXPIRE', 'h', 60 + i)"
