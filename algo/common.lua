-- sluice algorithms, common part: each algorithm's script is this file
-- followed by the algorithm's own (fixed_window.lua, ...), sent as one
-- script so that Redis runs the whole check alone. It mirrors report.go.
--
-- KEYS[1]  the key of one caller's state
-- ARGV[1]  "c" to check, "a" to adjust
-- ARGV[2]  now in Unix microseconds, or "" to use the Redis server's TIME
-- ARGV[3]  cost (check) or delta (adjust), an integer
-- ARGV[4]  max delay in microseconds (check; 0 = none)
-- ARGV[5]  expiry margin in milliseconds
-- ARGV[6], ARGV[7], ...  rate (units per second) and burst of each rule
--
-- Returns {allowed 0|1, reported rule (0-based), limit, remaining,
-- retry after µs, reset after µs, delay µs}, as the token bucket does.
--
-- Times are whole microseconds held in doubles: exact below 2^53 µs (the
-- year 2255), so the integer arithmetic of the Go code is exact here too.

local tolerance = 1e-9 -- same as report.go: absorbs float64 rounding

local key = KEYS[1]
local op = ARGV[1]
local now
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[2])
end
local amount = tonumber(ARGV[3])
local max_delay = tonumber(ARGV[4])
local margin_ms = tonumber(ARGV[5])

local n = (#ARGV - 5) / 2
local rate, burst, win = {}, {}, {}
for i = 1, n do
  rate[i] = tonumber(ARGV[4 + 2 * i])
  burst[i] = tonumber(ARGV[5 + 2 * i])
end

-- ceil_micros rounds a span of µs up; non-positive is 0, and 2^53 or more
-- is 2^53 (maxMicros in report.go: where every span saturates).
local max_us = 9007199254740992
local function ceil_micros(us)
  if us <= 0 then
    return 0
  end
  if us >= max_us then
    return max_us
  end
  return math.ceil(us)
end

-- window: W = Burst/Rate seconds rounded up to the µs, as Rule.RefillTime,
-- except that a quotient within float rounding of a whole number of µs is
-- that number (window in report.go: n per minute is exactly a minute).
for i = 1, n do
  local us = burst[i] / rate[i] * 1e6
  local near = math.floor(us + 0.5)
  if near >= 1 and near < max_us and math.abs(us - near) <= tolerance * near then
    win[i] = near
  else
    win[i] = ceil_micros(us)
  end
end

-- remaining: the whole number of units in room, never below zero.
local function remaining(room)
  if room <= 0 then
    return 0
  end
  return math.floor(room + tolerance)
end

-- fmt writes an integer exactly; tostring would print only 14 digits.
local function fmt(x)
  return string.format('%d', x)
end

-- max_of is math.max for two numbers (kept explicit to mirror Go's max).
local function max_of(a, b)
  if a > b then
    return a
  end
  return b
end

-- add_count: a window's count plus delta, within 0 and 2^53 (addCount).
local function add_count(count, delta)
  if delta > max_us - count then
    return max_us
  end
  return max_of(0, count + delta)
end

-- pick: denied, the rule that makes the caller wait longest; allowed, the
-- one with the fewest units left, ties to the one furthest from idle.
-- out_retry, out_rem, out_reset are per rule; retry is the overall wait.
local function pick(allowed, out_retry, out_rem, out_reset, retry, delay)
  local best, best_rem, best_reset, best_retry = 1, math.huge, -1, 0
  for i = 1, n do
    if not allowed then
      if out_retry[i] > best_retry then
        best, best_retry = i, out_retry[i]
      end
    elseif out_rem[i] < best_rem or (out_rem[i] == best_rem and out_reset[i] > best_reset) then
      best, best_rem, best_reset = i, out_rem[i], out_reset[i]
    end
  end
  if allowed then
    retry = 0
  end
  return { allowed and 1 or 0, best - 1, burst[best], out_rem[best], retry, out_reset[best], delay }
end

-- expiry in ms for state idle at idle_at (Unix µs): until then, plus the
-- margin; never zero, so every write carries one.
local function expiry_ms(idle_at)
  return math.ceil(max_of(0, idle_at - now) / 1000) + margin_ms
end
