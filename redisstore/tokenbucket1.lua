-- sluice token bucket, one check of one rule: the common case, in the
-- fewest steps Redis's interpreter can take. It mirrors decideOne in
-- bucket.go line by line, as tokenbucket.lua mirrors Decide; the
-- differential tests hold both scripts against the Go (one-rule checks
-- come here, the rest go to tokenbucket.lua).
--
-- KEYS[1]  the caller's key
-- ARGV[1]  little-endian float64s, packed: now (Unix µs, or -1 for the
--          server's TIME), expiry margin (ms), cost, max delay (µs), rate
--          (tokens/s), burst
-- Returns 7 packed float64s, as tokenbucket.lua does for each check.

local tolerance = 1e-9 -- as in bucket.go
local max_us = 9007199254740992 -- 2^53 µs: MaxWait, where every wait saturates
local now, margin_ms, cost, max_delay, rate, burst = struct.unpack('<dddddd', ARGV[1])
if now < 0 then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local key = KEYS[1]

-- A missing or differently sized value is a full bucket (FullBucket).
local tokens, last = burst, now
local packed = redis.call('GET', key)
if packed and #packed == 16 then
  tokens, last = struct.unpack('<dd', packed)
end

-- refill: min(burst, tokens + max(0, now - last) * rate); last never moves
-- backwards, so a clock that is behind never mints tokens.
local elapsed = now - last
if elapsed < 0 then
  elapsed = 0
end
tokens = math.min(burst, tokens + elapsed / 1e6 * rate)
if last < now then
  last = now
end

-- wait: µs until cost tokens are there (micros).
local wait = 0
if tokens + tolerance < cost then
  wait = math.ceil((cost - tokens) / rate * 1e6)
  if wait > max_us then wait = max_us end -- saturates (micros)
end
local allowed = wait == 0 or (max_delay > 0 and wait <= max_delay)
local retry, delay = 0, 0
if not allowed then
  retry = wait
else
  if wait > 0 then
    delay = wait
  end
  tokens = tokens - cost
end

local rem, reset = 0, 0
if tokens > 0 then
  rem = math.floor(tokens + tolerance) -- remaining
end
if burst - tokens > 0 then
  reset = math.ceil((burst - tokens) / rate * 1e6)
  if reset > max_us then reset = max_us end -- saturates (micros)
end

-- ExpiryAfter: until the bucket is full again, plus the margin; on every
-- path, denials included.
redis.call('SET', key, struct.pack('<dd', tokens, last), 'PX', math.ceil(reset / 1000) + margin_ms)
return struct.pack('<ddddddd', allowed and 1 or 0, 0, burst, rem, retry, reset, delay)
