-- sluice token bucket: one check or adjustment of every rule of one key,
-- atomic because Redis runs a script alone. It mirrors, line by line, the
-- Go definition in bucket.go (refill, Decide, AdjustBuckets, report,
-- remaining, micros, ExpiryAfter); redisstore's differential test holds the
-- two against each other, so change both or neither.
--
-- KEYS[1]  the key: every rule's bucket of one caller, in one string
-- ARGV[1]  "c" to check, "a" to adjust
-- ARGV[2]  now in Unix microseconds, or "" to use the Redis server's TIME
-- ARGV[3]  cost (check) or delta (adjust), an integer
-- ARGV[4]  max delay in microseconds (check; 0 = no reservation)
-- ARGV[5]  expiry margin in milliseconds
-- ARGV[6], ARGV[7], ...  rate (tokens per second) and burst of each rule
--
-- The value is struct-packed little-endian doubles, (tokens, last) per
-- rule: 16 bytes a rule, exact (last < 2^53 µs), cheaper to read than text.
-- A missing or differently sized value is a set of full buckets.
--
-- Returns {allowed 0|1, reported rule (0-based), limit, remaining,
-- retry after µs, reset after µs, delay µs}.

local tolerance = 1e-9 -- same as bucket.go: absorbs float64 rounding

local key = KEYS[1]
local op = ARGV[1]
local now
if ARGV[2] == "" then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[2])
end
local amount = tonumber(ARGV[3])
local max_delay = tonumber(ARGV[4])
local margin_ms = tonumber(ARGV[5])

local n = (#ARGV - 5) / 2
local rate, burst = {}, {}
for i = 1, n do
  rate[i] = tonumber(ARGV[4 + 2 * i])
  burst[i] = tonumber(ARGV[5 + 2 * i])
end

local format = '<' .. string.rep('d', 2 * n)
local tokens, last = {}, {}
local packed = redis.call('GET', key)
if packed and #packed == 16 * n then
  local v = { struct.unpack(format, packed) }
  for i = 1, n do
    tokens[i] = v[2 * i - 1]
    last[i] = v[2 * i]
  end
else
  for i = 1, n do -- FullBucket
    tokens[i] = burst[i]
    last[i] = now
  end
end

-- micros rounds seconds up to whole microseconds; non-positive is 0.
local function micros(seconds)
  if seconds <= 0 then
    return 0
  end
  return math.ceil(seconds * 1e6)
end

-- remaining is the whole number of tokens, never below zero.
local function remaining(t)
  if t <= 0 then
    return 0
  end
  return math.floor(t + tolerance)
end

-- refill: min(burst, tokens + max(0, now - last) * rate); records the
-- refill, and last never moves backwards, so a clock that is behind never
-- mints tokens.
local function refill(i)
  local elapsed = now - last[i]
  if elapsed < 0 then
    elapsed = 0
  end
  local gained = elapsed / 1e6 * rate[i]
  tokens[i] = math.min(burst[i], tokens[i] + gained)
  if last[i] < now then
    last[i] = now
  end
end

local allowed
local cost = 0
local wait = 0
if op == 'c' then -- Decide
  cost = amount
  for i = 1, n do
    refill(i)
    if tokens[i] + tolerance < cost then
      local w = micros((cost - tokens[i]) / rate[i])
      if w > wait then
        wait = w
      end
    end
  end
  allowed = wait == 0 or (max_delay > 0 and wait <= max_delay)
  if allowed then
    for i = 1, n do
      tokens[i] = tokens[i] - cost
    end
  end
else -- AdjustBuckets
  allowed = true
  for i = 1, n do
    refill(i)
    tokens[i] = math.min(burst[i], tokens[i] - amount)
    if tokens[i] + tolerance < 0 then
      allowed = false
    end
  end
end

-- report: denied, the rule that makes the caller wait longest; allowed,
-- the one with the fewest whole tokens, ties to the one furthest from full.
local best, best_rem, best_reset, retry = 1, math.huge, -1, 0
local longest = 0
for i = 1, n do
  local reset = micros((burst[i] - tokens[i]) / rate[i])
  if reset > longest then
    longest = reset
  end
  if not allowed then
    local w = 0
    if tokens[i] + tolerance < cost then
      w = micros((cost - tokens[i]) / rate[i])
    end
    if w > retry then
      best, retry = i, w
    end
  else
    local rem = remaining(tokens[i])
    if rem < best_rem or (rem == best_rem and reset > best_reset) then
      best, best_rem, best_reset = i, rem, reset
    end
  end
end

-- ExpiryAfter: keep the state until every bucket is full again, plus the
-- margin; set on every path, denials included.
local state = {}
for i = 1, n do
  state[2 * i - 1] = tokens[i]
  state[2 * i] = last[i]
end
redis.call('SET', key, struct.pack(format, unpack(state)), 'PX', math.ceil(longest / 1000) + margin_ms)

local delay = 0
if allowed and wait > 0 then
  delay = wait
end
return { allowed and 1 or 0, best - 1, burst[best], remaining(tokens[best]), retry,
  micros((burst[best] - tokens[best]) / rate[best]), delay }
