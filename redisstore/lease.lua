-- sluice token bucket, a lease (see lease.go): give back what an instance
-- returns, then take up to want whole tokens for it to spend locally. It
-- works on the very bucket tokenbucket1.lua and tokenbucket.lua keep (one
-- rule, 16 bytes), so leased and plain checks of a key share one limit.
-- leaseStep in lease.go is its Go mirror, held to it by a differential test.
--
-- KEYS[1]  the caller's key
-- ARGV[1]  little-endian float64s, packed: now (Unix µs, or -1 for the
--          server's TIME), expiry margin (ms), returned (whole tokens given
--          back, ≥ 0), want (≥ cost), cost (≥ 0), rate (tokens/s), burst
-- Returns 6 packed float64s: granted tokens (0, or from cost to want),
-- the tokens left in the bucket, µs until cost tokens are there (0 when
-- granted), µs until min(want, burst) are, µs until the bucket is full,
-- and now.

local tolerance = 1e-9 -- as in bucket.go
local max_us = 9007199254740992 -- 2^53 µs: MaxWait, where every wait saturates
local now, margin_ms, returned, want, cost, rate, burst = struct.unpack('<ddddddd', ARGV[1])
if now < 0 then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local key = KEYS[1]

local tokens, last = burst, now
local packed = redis.call('GET', key)
if packed and #packed == 16 then
  tokens, last = struct.unpack('<dd', packed)
end

-- refill, as decideOne; then the return, as AdjustBuckets with a negative
-- delta: never above the burst.
local elapsed = now - last
if elapsed < 0 then
  elapsed = 0
end
tokens = math.min(burst, tokens + elapsed / 1e6 * rate)
if last < now then
  last = now
end
tokens = math.min(burst, tokens + returned)

local function micros(t)
  if t <= 0 then return 0 end
  local w = math.ceil(t / rate * 1e6)
  if w > max_us then w = max_us end
  return w
end

local grant, wait = 0, 0
if tokens + tolerance >= cost then
  grant = math.min(want, math.floor(tokens + tolerance))
  tokens = tokens - grant
else
  wait = micros(cost - tokens)
end
local wait_lease = micros(math.min(want, burst) - tokens)
local reset = micros(burst - tokens)

redis.call('SET', key, struct.pack('<dd', tokens, last), 'PX', math.ceil(reset / 1000) + margin_ms)
return struct.pack('<dddddd', grant, tokens, wait, wait_lease, reset, now)
